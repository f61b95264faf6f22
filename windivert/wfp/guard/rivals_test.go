package guard

import (
	"strconv"
	"strings"
	"testing"

	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/wfptest"
)

// TestRivalsWireGuard: WireGuard's kill switch (a sublayer at 0xFFFF with hard permits for
// loopback and the tunnel) defeats the guard's blocks for what it permits: with the router
// stopped, the caged VM reaches this machine and leaves through the tunnel. Rivals reports
// it, its hard permits, and what they defeat; Windows Firewall's sublayer, below ours, is
// not a rival.
func TestRivalsWireGuard(t *testing.T) {
	eng := newMachine()
	g := New(eng, nil)
	if _, err := g.Install(mustPlan(t, baseEnv())); err != nil {
		t.Fatal(err)
	}
	if rs, err := Rivals(eng); err != nil || len(rs) != 0 {
		t.Fatalf("Rivals without a VPN = %v, %v; want none", rs, err)
	}
	const tunnel = 0x77
	loop := wfptest.Flow{Dir: wfptest.Outbound, App: vboxVM, Proto: wfp.ProtoTCP, Local: ap("127.0.0.1:50000"), Remote: ap("127.0.0.1:22")}
	viaTunnel := wfptest.Flow{Dir: wfptest.Outbound, App: vboxVM, Proto: wfp.ProtoTCP, Local: ap("10.8.0.2:50000"), Remote: public, Interface: tunnel}
	for _, f := range []wfptest.Flow{loop, viaTunnel} {
		if v := eng.Classify(f); v.Action != wfp.Block {
			t.Fatalf("without the kill switch, %v: %v, want blocked by the guard", f, v)
		}
	}
	sub := eng.KillSwitch(tunnel)
	for _, f := range []wfptest.Flow{loop, viaTunnel} {
		if v := eng.Classify(f); v.Action != wfp.Permit {
			t.Errorf("with the kill switch, %v: %v; the model says a higher hard permit wins", f, v)
		}
	}
	rs, err := Rivals(eng)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Sublayer.Key != sub {
		t.Fatalf("Rivals = %v, want WireGuard's sublayer", rs)
	}
	if n := len(rs[0].HardPermits); n != 8 {
		t.Errorf("%d hard permits reported, want 8 (loopback and tunnel at 4 layers)", n)
	}
	got := rs[0].String()
	for _, want := range []string{"WireGuard filters", "0xffff", "Permit loopback", "caged apps' connections", "host walls"} {
		if !strings.Contains(got, want) {
			t.Errorf("report %q lacks %q", got, want)
		}
	}
}

// TestOwnPortsOnlyTheRouter: while the router runs, only its process may connect from the
// source ports reserved for it (the capture's filters leave those out).
func TestOwnPortsOnlyTheRouter(t *testing.T) {
	eng := newMachine()
	env := baseEnv()
	env.OwnPorts = []wfp.PortRange{{From: 61000, To: 61999}}
	g := New(eng, nil)
	if _, err := g.Install(mustPlan(t, env)); err != nil {
		t.Fatal(err)
	}
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	from := func(app string, sids []string, port uint16) wfptest.Flow {
		return wfptest.Flow{Dir: wfptest.Outbound, App: app, SIDs: sids, Proto: wfp.ProtoTCP, Local: ap("192.168.1.10:" + itoa(port)), Remote: public}
	}
	for _, tc := range []struct {
		name string
		flow wfptest.Flow
		want wfp.Action
	}{
		{"the router from its port", from(routerExe, routerSIDs, 61005), wfp.Permit},
		{"chrome from the router's port", from(chrome, nil, 61005), wfp.Block},
		{"the caged VM from the router's port", from(vboxVM, nil, 61005), wfp.Block},
		{"chrome from another port", from(chrome, nil, 50000), wfp.Permit},
	} {
		if v := eng.Classify(tc.flow); v.Action != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, v, tc.want)
		}
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }
