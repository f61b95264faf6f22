package wfp

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
)

func TestNameKey(t *testing.T) {
	// RFC 4122 appendix B's example, with the DNS namespace: a known v5 UUID.
	dns, err := ParseKey("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := NameKey(dns, "www.example.com").String(), "{2ED6657D-E927-568B-95E1-2665A8AEA6A2}"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if k, err := ParseKey("{2ED6657D-E927-568B-95E1-2665A8AEA6A2}"); err != nil || k != NameKey(dns, "www.example.com") {
		t.Errorf("parse braced: %v %v", k, err)
	}
}

func TestValidate(t *testing.T) {
	ok := Filter{Key: Key{1}, Name: "f", Layer: LayerConnectV4, Action: Block, Conditions: []Condition{App(`C:\a.exe`), RemoteAddr(netip.MustParsePrefix("10.0.0.0/8"))}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Filter){
		"zero key":            func(f *Filter) { f.Key = Key{} },
		"no name":             func(f *Filter) { f.Name = "" },
		"bad layer":           func(f *Filter) { f.Layer = 0 },
		"bad action":          func(f *Filter) { f.Action = 0 },
		"persistent and boot": func(f *Filter) { f.Persistent, f.BootTime = true, true },
		"hard block":          func(f *Filter) { f.Hard = true },
		"v6 prefix on v4":     func(f *Filter) { f.Conditions = []Condition{RemoteAddr(netip.MustParsePrefix("::/0"))} },
		"app at forward":      func(f *Filter) { f.Layer = LayerForwardV4 },
		"source at connect":   func(f *Filter) { f.Conditions = []Condition{SourceAddr(netip.MustParsePrefix("10.0.0.0/8"))} },
		"empty range":         func(f *Filter) { f.Conditions = []Condition{RemotePort(PortRange{5, 4})} },
		"user without a SID":  func(f *Filter) { f.Conditions = []Condition{User("router")} },
		"empty app":           func(f *Filter) { f.Conditions = []Condition{App("")} },
	} {
		f := ok
		mod(&f)
		if err := f.Validate(); err == nil {
			t.Errorf("%s: valid", name)
		}
	}
}

func TestCodeIs(t *testing.T) {
	for _, c := range []struct {
		code   Code
		target error
	}{
		{CodeFilterNotFound, ErrNotFound}, {CodeSublayerNotFound, ErrNotFound}, {CodeProviderNotFound, ErrNotFound},
		{CodeAlreadyExists, ErrAlreadyExists}, {CodeInUse, ErrInUse}, {CodeInvalidHandle, ErrClosed},
		{CodeEngineNotRunning, ErrUnavailable}, {CodeCallNotImplemented, ErrUnavailable},
	} {
		if err := fmt.Errorf("op: %w", c.code); !errors.Is(err, c.target) {
			t.Errorf("%v is not %v", c.code, c.target)
		}
	}
	if errors.Is(CodeInUse, ErrNotFound) {
		t.Error("in use is not found")
	}
}
