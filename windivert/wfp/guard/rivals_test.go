package guard

import (
	"strconv"
	"strings"
	"testing"

	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/wfptest"
)

// TestRivalsWireGuard: WireGuard's kill switch (a sublayer at 0xFFFF: soft permits for
// loopback and the tunnel, one hard permit scoped to wireguard.exe, a block of the rest)
// does not defeat the guard: with the router stopped the caged VM stays blocked on the
// tunnel and to this machine. Rivals reports it as above the guard with no hard permit
// that reaches a caged app, and says what its block breaks for the router; Windows
// Firewall's sublayer, below ours, is not a rival.
func TestRivalsWireGuard(t *testing.T) {
	eng := newMachine()
	g := New(eng, nil)
	env := baseEnv()
	if _, err := g.Install(mustPlan(t, env)); err != nil {
		t.Fatal(err)
	}
	if rs, err := Rivals(eng, env.CagedApps); err != nil || len(rs) != 0 {
		t.Fatalf("Rivals without a VPN = %v, %v; want none", rs, err)
	}
	const tunnel = 0x77
	loop := wfptest.Flow{Dir: wfptest.Outbound, App: vboxVM, Proto: wfp.ProtoTCP, Local: ap("127.0.0.1:50000"), Remote: ap("127.0.0.1:22")}
	viaTunnel := wfptest.Flow{Dir: wfptest.Outbound, App: vboxVM, Proto: wfp.ProtoTCP, Local: ap("10.8.0.2:50000"), Remote: public, Interface: tunnel}
	wg := wfptest.Flow{Dir: wfptest.Outbound, App: wfptest.WireGuardExe, SIDs: []string{"S-1-5-18"}, Proto: wfp.ProtoUDP, Local: ap("192.168.1.10:51820"), Remote: public}
	sub := eng.KillSwitch(tunnel)
	for _, f := range []wfptest.Flow{loop, viaTunnel} {
		if v := eng.Classify(f); v.Action != wfp.Block {
			t.Errorf("with WireGuard's kill switch, router stopped, %v: %v; want blocked (its permits are soft)", f, v)
		}
	}
	if v := eng.Classify(wg); v.Action != wfp.Permit {
		t.Errorf("WireGuard's own service %v: %v, want permitted by its hard permit", wg, v)
	}
	rs, err := Rivals(eng, env.CagedApps)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Sublayer.Key != sub {
		t.Fatalf("Rivals = %v, want WireGuard's sublayer", rs)
	}
	if n, m := len(rs[0].HardPermits), len(rs[0].Scoped); n != 0 || m != 4 {
		t.Errorf("%d hard permits reaching caged apps and %d scoped reported, want 0 and 4 (wireguard.exe's at 4 layers)", n, m)
	}
	got := rs[0].String()
	for _, want := range []string{"WireGuard filters", "0xffff", "no hard permit reaches the caged apps", "redirected connections", "DNS"} {
		if !strings.Contains(got, want) {
			t.Errorf("report %q lacks %q", got, want)
		}
	}
	// Caging wireguard.exe itself makes its hard permit a defeat.
	rs, err = Rivals(eng, append(env.CagedApps, strings.ToUpper(wfptest.WireGuardExe)))
	if err != nil || len(rs) != 1 || len(rs[0].HardPermits) != 4 {
		t.Errorf("wireguard.exe caged: Rivals = %v, %v; want its 4 hard permits as defeats", rs, err)
	}
}

// TestRivalsHardKillSwitch: a kill switch whose loopback and tunnel permits are hard
// defeats the guard for what they match: with the router stopped, the caged VM reaches
// this machine and leaves through the tunnel. Rivals reports its hard permits and what
// they defeat.
func TestRivalsHardKillSwitch(t *testing.T) {
	eng := newMachine()
	g := New(eng, nil)
	env := baseEnv()
	if _, err := g.Install(mustPlan(t, env)); err != nil {
		t.Fatal(err)
	}
	const tunnel = 0x77
	loop := wfptest.Flow{Dir: wfptest.Outbound, App: vboxVM, Proto: wfp.ProtoTCP, Local: ap("127.0.0.1:50000"), Remote: ap("127.0.0.1:22")}
	viaTunnel := wfptest.Flow{Dir: wfptest.Outbound, App: vboxVM, Proto: wfp.ProtoTCP, Local: ap("10.8.0.2:50000"), Remote: public, Interface: tunnel}
	sub := eng.HardKillSwitch(tunnel)
	for _, f := range []wfptest.Flow{loop, viaTunnel} {
		if v := eng.Classify(f); v.Action != wfp.Permit {
			t.Errorf("with the hard kill switch, %v: %v; the model says a higher hard permit wins", f, v)
		}
	}
	rs, err := Rivals(eng, env.CagedApps)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Sublayer.Key != sub {
		t.Fatalf("Rivals = %v, want the kill switch's sublayer", rs)
	}
	if n := len(rs[0].HardPermits); n != 8 {
		t.Errorf("%d hard permits reported, want 8 (loopback and tunnel at 4 layers)", n)
	}
	got := rs[0].String()
	for _, want := range []string{"HardVPN filters", "0xffff", "Permit loopback", "caged apps' connections", "host walls"} {
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
