package nftcap

import (
	"strings"
	"testing"
	"time"
)

// TestExpectedLayout: the layout computed without the kernel is what the kernel holds
// after Install (the check of a whole table finds nothing), for each shape of spec.
func TestExpectedLayout(t *testing.T) {
	ns := newNetNS(t, "layout")
	noDNS := typicalSpec()
	noDNS.DNSPort = 0
	noDNS.Local = false
	ifaces := typicalSpec()
	ifaces.VMInterfaces = []string{"virbr0", "vboxnet*"}
	ifaces.LocalUDPAllow = []uint16{123}
	for name, spec := range map[string]Spec{"typical": typicalSpec(), "no dns, not local": noDNS, "interfaces": ifaces, "scene": sceneSpec()} {
		t.Run(name, func(t *testing.T) {
			if err := Install(spec, WithNetNS(ns.fd)); err != nil {
				t.Fatal(err)
			}
			damage, err := Check(spec, WithNetNS(ns.fd))
			if err != nil || damage != "" {
				t.Fatalf("Check after Install = %q, %v; want a whole table", damage, err)
			}
		})
	}
}

// TestCheckFindsDamage: each way of breaking the table from outside is found and named, and
// Install repairs it.
func TestCheckFindsDamage(t *testing.T) {
	ns := newNetNS(t, "damage")
	spec := typicalSpec()
	for _, tc := range []struct {
		name, nft, want string
	}{
		{"flush ruleset", "flush ruleset", "table inet router is missing"},
		{"delete table", "delete table inet router", "table inet router is missing"},
		{"flush a chain", "flush chain inet router input", "chain input has 0 rules"},
		{"delete a chain", "flush chain inet router forward\ndelete chain inet router forward", "chain forward is missing"},
		{"insert an accept", "insert rule inet router input accept", "chain input has"},
		{"foreign chain", "add chain inet router extra", "chain extra is not the router's"},
		{"drop a vm network", "flush set inet router vm4", "set vm4 has 0 elements"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Install(spec, WithNetNS(ns.fd)); err != nil {
				t.Fatal(err)
			}
			ns.nft(t, tc.nft+"\n")
			damage, err := Check(spec, WithNetNS(ns.fd))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(damage, tc.want) {
				t.Errorf("Check after %q = %q, want it to say %q", tc.nft, damage, tc.want)
			}
			if err := Install(spec, WithNetNS(ns.fd)); err != nil {
				t.Fatal(err)
			}
			if damage, err := Check(spec, WithNetNS(ns.fd)); err != nil || damage != "" {
				t.Errorf("Check after the repair = %q, %v", damage, err)
			}
		})
	}
}

// TestWatch: a change to the router's table is reported at once with the process that made
// it; a change to another table is not; Close ends the channel.
func TestWatch(t *testing.T) {
	ns := newNetNS(t, "watch")
	spec := typicalSpec()
	if err := Install(spec, WithNetNS(ns.fd)); err != nil {
		t.Fatal(err)
	}
	w, err := Watch(spec.Table, WithNetNS(ns.fd))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := func(d time.Duration) (Change, bool) {
		select {
		case ch, ok := <-w.Changes():
			if !ok {
				t.Fatal("the watcher ended")
			}
			return ch, true
		case <-time.After(d):
			return Change{}, false
		}
	}

	ns.nft(t, "add table inet other\nadd chain inet other c\nadd rule inet other c accept\n")
	if ch, ok := next(300 * time.Millisecond); ok {
		t.Errorf("a change of another table was reported: %+v", ch)
	}

	start := time.Now()
	ns.nft(t, "flush ruleset\n")
	ch, ok := next(time.Second)
	if !ok {
		t.Fatal("flush ruleset was not reported within 1s")
	}
	if ch.Err != nil || ch.Comm != "nft" || ch.PID == 0 {
		t.Errorf("change = %+v, want one made by nft with its pid", ch)
	}
	t.Logf("flush ruleset reported after %v: %+v", time.Since(start), ch)

	if err := w.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	deadline := time.After(2 * time.Second)
	for {
		select {
		case _, ok := <-w.Changes():
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the channel stayed open after Close")
		}
	}
}
