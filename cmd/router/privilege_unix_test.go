//go:build !windows

package main

import "testing"

func TestCapEffHas(t *testing.T) {
	status := func(eff string) []byte {
		return []byte("Name:\trouter\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t" + eff + "\nCapBnd:\t000001ffffffffff\n")
	}
	for _, c := range []struct {
		eff  string
		want bool
	}{
		{"000001ffffffffff", true}, // root
		{"0000000000001000", true}, // CAP_NET_ADMIN alone (the unit's ambient set)
		{"0000000000000000", false},
		{"0000000000000400", false}, // CAP_NET_BIND_SERVICE only
	} {
		if got, err := capEffHas(status(c.eff), capNetAdmin); err != nil || got != c.want {
			t.Errorf("CapEff %s: %v, %v; want %v", c.eff, got, err, c.want)
		}
	}
	if _, err := capEffHas([]byte("Name:\trouter\n"), capNetAdmin); err == nil {
		t.Error("no CapEff line: no error")
	}
	if _, err := capEffHas(status("zz"), capNetAdmin); err == nil {
		t.Error("a bad CapEff: no error")
	}
}
