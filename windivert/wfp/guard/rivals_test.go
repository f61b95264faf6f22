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
	eng, env, loop, viaTunnel := killSwitchScene(t)
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
	r := oneRival(t, eng, env.CagedApps, sub, "WireGuard filters", "0xffff", "no hard permit reaches the caged apps", "redirected connections", "DNS")
	if n, m := len(r.HardPermits), len(r.Scoped); n != 0 || m != 4 {
		t.Errorf("%d hard permits reaching caged apps and %d scoped reported, want 0 and 4 (wireguard.exe's at 4 layers)", n, m)
	}
	// Caging wireguard.exe itself makes its hard permit a defeat.
	rs, err := Rivals(eng, append(env.CagedApps, strings.ToUpper(wfptest.WireGuardExe)))
	if err != nil || len(rs) != 1 || len(rs[0].HardPermits) != 4 {
		t.Errorf("wireguard.exe caged: Rivals = %v, %v; want its 4 hard permits as defeats", rs, err)
	}
}

// TestRivalsHardKillSwitch: a kill switch whose loopback and tunnel permits are hard
// defeats the guard for what they match: with the router stopped, the caged VM reaches
// this machine and leaves through the tunnel. Rivals reports its hard permits and what
// they defeat.
func TestRivalsHardKillSwitch(t *testing.T) {
	eng, env, loop, viaTunnel := killSwitchScene(t)
	sub := eng.HardKillSwitch(tunnel)
	for _, f := range []wfptest.Flow{loop, viaTunnel} {
		if v := eng.Classify(f); v.Action != wfp.Permit {
			t.Errorf("with the hard kill switch, %v: %v; the model says a higher hard permit wins", f, v)
		}
	}
	r := oneRival(t, eng, env.CagedApps, sub, "HardVPN filters", "0xffff", "Permit loopback", "caged apps' connections", "host walls")
	if n := len(r.HardPermits); n != 8 {
		t.Errorf("%d hard permits reported, want 8 (loopback and tunnel at 4 layers)", n)
	}
}

// tunnel is the interface of the kill switches' VPN tunnel.
const tunnel = 0x77

// killSwitchScene installs the guard on a fake machine, where Rivals finds none yet, and
// returns the machine, its env and the two flows of the caged VM a VPN's kill switch decides:
// to this machine over loopback, and out through the tunnel.
func killSwitchScene(t *testing.T) (eng *wfptest.Engine, env Env, loop, viaTunnel wfptest.Flow) {
	t.Helper()
	eng = newMachine()
	env = baseEnv()
	if _, err := New(eng, nil).Install(mustPlan(t, env)); err != nil {
		t.Fatal(err)
	}
	if rs, err := Rivals(eng, env.CagedApps); err != nil || len(rs) != 0 {
		t.Fatalf("Rivals without a VPN = %v, %v; want none", rs, err)
	}
	loop = wfptest.Flow{Dir: wfptest.Outbound, App: vboxVM, Proto: wfp.ProtoTCP, Local: ap("127.0.0.1:50000"), Remote: ap("127.0.0.1:22")}
	viaTunnel = wfptest.Flow{Dir: wfptest.Outbound, App: vboxVM, Proto: wfp.ProtoTCP, Local: ap("10.8.0.2:50000"), Remote: public, Interface: tunnel}
	return eng, env, loop, viaTunnel
}

// oneRival returns the one rival Rivals finds for caged, which must be the sublayer sub, and
// checks that its report says each of says.
func oneRival(t *testing.T, eng *wfptest.Engine, caged []string, sub wfp.Key, says ...string) Rival {
	t.Helper()
	rs, err := Rivals(eng, caged)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Sublayer.Key != sub {
		t.Fatalf("Rivals = %v, want the sublayer %v alone", rs, sub)
	}
	got := rs[0].String()
	for _, want := range says {
		if !strings.Contains(got, want) {
			t.Errorf("report %q lacks %q", got, want)
		}
	}
	return rs[0]
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
