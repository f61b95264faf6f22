package adapters

import (
	"testing"

	"github.com/agentcage/router/internal/winetest"
)

// TestSystem reads this machine's adapters through winipcfg. Under Wine the adapters are
// the Linux host's (lo, eth0, ...): the table calls work, none is VM-facing, and
// Get-NetNat is missing (NAT unknown); on Windows the same test lists real adapters.
func TestSystem(t *testing.T) {
	ifs, err := NewSystem().Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	addrs := 0
	for _, i := range ifs {
		addrs += len(i.Prefixes)
		t.Logf("%q %q up=%v %v forwarding=%v", i.Name, i.Description, i.Up, i.Prefixes, i.Forwarding != nil && *i.Forwarding)
	}
	if addrs == 0 {
		t.Fatalf("%d interfaces and not one address", len(ifs))
	}
	as, _, err := List(NewSystem())
	if err != nil {
		t.Fatal(err)
	}
	if winetest.UnderWine() && len(as) != 0 {
		t.Errorf("under Wine, VM-facing adapters %+v", as)
	}
}
