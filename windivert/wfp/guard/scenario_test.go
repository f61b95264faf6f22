package guard

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/wfptest"
)

const (
	P = wfp.Permit
	B = wfp.Block

	curlExe = `C:\Windows\System32\curl.exe` // a scraper of the metrics endpoint
)

var (
	hostLAN     = netip.MustParseAddr("192.168.1.10")
	hostOnly    = netip.MustParseAddr("192.168.56.1")
	public      = netip.MustParseAddrPort("203.0.113.10:443")
	routerSIDs  = []string{ServiceSID("router")}
	dnscacheSID = []string{ServiceSID("Dnscache")}
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// probe is one flow of the fixed set and its expected verdict in each state.
type probe struct {
	name string
	flow wfptest.Flow
	// want per state: installed (the daemon not running), boot (before the BFE starts),
	// armed, removed.
	installed, boot, armed, removed wfp.Action
}

// probes returns the fixed set; local says whether the config has local = true.
func probes(local bool) []probe {
	dns := P // svchost's DNS when the router is not running
	if local {
		dns = B
	}
	out := func(app string, proto uint8, remote netip.AddrPort, sids ...string) wfptest.Flow {
		return wfptest.Flow{Dir: wfptest.Outbound, App: app, SIDs: sids, Proto: proto, Local: ap("192.168.1.10:50000"), Remote: remote}
	}
	in := func(local, remote netip.AddrPort) wfptest.Flow {
		return wfptest.Flow{Dir: wfptest.Inbound, App: routerExe, SIDs: routerSIDs, Proto: wfp.ProtoTCP, Local: local, Remote: remote}
	}
	return []probe{
		{"vbox to a public 443", out(vboxVM, wfp.ProtoTCP, public), B, B, P, P},
		{"vbox to 8.8.8.8:53/udp", out(vboxVM, wfp.ProtoUDP, ap("8.8.8.8:53")), B, B, P, P},
		{"vbox to a public v6 443", out(vboxVM, wfp.ProtoTCP, ap("[2001:db8::1]:443")), B, B, P, P},
		{"vbox ping", out(vboxVM, wfp.ProtoICMP, ap("8.8.8.8:0")), B, B, B, P},
		{"vbox to the model 127.0.0.1:47831", out(vboxVM, wfp.ProtoTCP, ap("127.0.0.1:47831")), P, B, P, P},
		{"vbox to 127.0.0.1:22", out(vboxVM, wfp.ProtoTCP, ap("127.0.0.1:22")), B, B, B, P},
		{"vbox to the metrics 127.0.0.1:9477", out(vboxVM, wfp.ProtoTCP, ap("127.0.0.1:9477")), B, B, B, P},
		{"a local scraper to the metrics 127.0.0.1:9477", out(curlExe, wfp.ProtoTCP, ap("127.0.0.1:9477")), P, P, P, P},
		{"vbox to the host's LAN address :445", out(vboxVM, wfp.ProtoTCP, netip.AddrPortFrom(hostLAN, 445)), B, B, B, P},
		{"vbox to the host-only address :3389", out(vboxVM, wfp.ProtoTCP, netip.AddrPortFrom(hostOnly, 3389)), B, B, B, P},
		{"vbox to [::1]:445", out(vboxVM, wfp.ProtoTCP, ap("[::1]:445")), B, B, B, P},
		{"VBoxNetNAT to a public 443", out(vboxNetNAT, wfp.ProtoTCP, public), B, B, P, P},
		{"svchost (Dnscache) to :53/udp", out(svchost, wfp.ProtoUDP, ap("192.168.1.1:53"), dnscacheSID...), dns, dns, P, P},
		{"svchost (Dnscache) to :853 (DoT)", out(svchost, wfp.ProtoTCP, ap("1.1.1.1:853"), dnscacheSID...), dns, dns, dns, P},
		{"router to its DNS upstream :53", out(routerExe, wfp.ProtoUDP, ap("1.1.1.1:53"), routerSIDs...), P, dns, P, P},
		{"router accepts on its listener from a public address", in(ap("192.168.1.10:47100"), public), B, B, P, B},
		{"router accepts on its DNS port", in(ap("192.168.1.10:47153"), ap("8.8.8.8:53")), B, B, P, B},
		{"router accepts on the forward from an allowed guest", in(ap("192.168.56.1:47831"), ap("192.168.56.101:40000")), B, B, P, B},
		{"router accepts on the forward from a public address", in(ap("192.168.56.1:47831"), ap("203.0.113.77:40000")), B, B, B, B},
		{"chrome to a public 443", out(chrome, wfp.ProtoTCP, public), P, P, P, P},
		{"chrome to the host's LAN address :445", out(chrome, wfp.ProtoTCP, netip.AddrPortFrom(hostLAN, 445)), P, P, P, P},
		{"chrome to 127.0.0.1:22", out(chrome, wfp.ProtoTCP, ap("127.0.0.1:22")), P, P, P, P},
		{"vbox ping v6", out(vboxVM, wfp.ProtoICMPv6, ap("[2001:db8::1]:0")), B, B, B, P},
		{"chrome ping", out(chrome, wfp.ProtoICMP, ap("8.8.8.8:0")), P, P, P, P},
	}
}

// newMachine returns an engine with the host's addresses and Windows Firewall's stand-in.
func newMachine() *wfptest.Engine {
	eng := wfptest.New()
	eng.SetHostAddrs(hostLAN, hostOnly)
	eng.WindowsFirewall()
	return eng
}

// expect classifies every probe and checks the verdict pick chooses.
func expect(t *testing.T, eng *wfptest.Engine, state string, ps []probe, pick func(probe) wfp.Action) {
	t.Helper()
	for _, p := range ps {
		if got, want := eng.Classify(p.flow), pick(p); got.Action != want {
			t.Errorf("%s: %s: got %v, want %v", state, p.name, got, want)
		}
	}
}

func installed(p probe) wfp.Action { return p.installed }
func boot(p probe) wfp.Action      { return p.boot }
func armed(p probe) wfp.Action     { return p.armed }
func removed(p probe) wfp.Action   { return p.removed }

func mustPlan(t *testing.T, env Env) Plan {
	t.Helper()
	p, err := NewPlan(env)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestScenario walks the guard through a machine's life and classifies the fixed flows at
// every step: install, reboot, start, crash, restart, reload, stop, cleanup.
func TestScenario(t *testing.T) {
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("local=%v", local), func(t *testing.T) {
			eng := newMachine()
			env := baseEnv()
			env.DNSAll = local
			ps := probes(local)
			plan := mustPlan(t, env)

			// router service install: the guard exists before the first start.
			installer := eng.Process("router service install")
			if _, err := New(installer, nil).Install(plan); err != nil {
				t.Fatal(err)
			}
			installer.Exit()
			expect(t, eng, "after install", ps, installed)

			// Reboot: boot-time filters until the BFE starts, then the persistent ones.
			eng.Reboot()
			expect(t, eng, "boot, before the BFE", ps, boot)
			eng.Boot()
			expect(t, eng, "booted, router not started", ps, installed)

			// Start: reconcile, (listeners, WinDivert, engine), arm.
			svc := eng.Process("router service")
			g := New(svc, nil)
			if _, err := g.Install(plan); err != nil {
				t.Fatal(err)
			}
			expect(t, eng, "started, not yet armed", ps, installed)
			if err := g.Arm(); err != nil {
				t.Fatal(err)
			}
			expect(t, eng, "armed", ps, armed)

			// Crash (taskkill /F): Windows ends the dynamic session.
			svc.Exit()
			expect(t, eng, "after a crash (and in the restart delay)", ps, installed)

			// Restart by the service manager.
			svc = eng.Process("router service, restarted")
			g = New(svc, nil)
			rep, err := g.Install(plan)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Added != 0 || rep.Deleted != 0 {
				t.Errorf("restart re-added filters: %+v (unchanged filters must be left alone)", rep)
			}
			if err := g.Arm(); err != nil {
				t.Fatal(err)
			}
			expect(t, eng, "restarted", ps, armed)

			// Reload: QEMU joins the cage, VBoxHeadless leaves it. Every state the engine
			// shows during the reload keeps VirtualBoxVM permitted and the host closed,
			// and QEMU is never let through to anything but the capture.
			env2 := env
			env2.CagedApps = []string{vboxVM, vboxNetNAT, qemu}
			plan2 := mustPlan(t, env2)
			qemuOut := wfptest.Flow{Dir: wfptest.Outbound, App: qemu, Proto: wfp.ProtoTCP, Remote: public}
			qemuHost := wfptest.Flow{Dir: wfptest.Outbound, App: qemu, Proto: wfp.ProtoTCP, Remote: ap("127.0.0.1:22")}
			var during []string
			before := eng.Commits()
			eng.Observe(func() {
				if v := eng.Classify(ps[0].flow); v.Action != P {
					during = append(during, "vbox blocked: "+v.String())
				}
				if v := eng.Classify(ps[5].flow); v.Action != B {
					during = append(during, "vbox reached the host: "+v.String())
				}
				if v := eng.Classify(qemuHost); v.Action != P && v.Action != B {
					during = append(during, "qemu: "+v.String())
				}
			})
			if _, err := g.Install(plan2); err != nil {
				t.Fatal(err)
			}
			eng.Observe(nil)
			if n := eng.Commits() - before; n != 2 {
				t.Errorf("reload made %d visible changes, want 2 (one transaction for the persistent filters, one for the permits)", n)
			}
			if len(during) > 0 {
				t.Errorf("during the reload: %s", strings.Join(during, "; "))
			}
			expect(t, eng, "reloaded", ps[:1], armed)
			if v := eng.Classify(qemuOut); v.Action != P {
				t.Errorf("reloaded: qemu to a public 443: %v, want permit (caged, the router runs)", v)
			}
			if v := eng.Classify(qemuHost); v.Action != B {
				t.Errorf("reloaded: qemu to 127.0.0.1:22: %v, want block", v)
			}
			headless := wfptest.Flow{Dir: wfptest.Outbound, App: vboxHeadless, Proto: wfp.ProtoTCP, Remote: ap("127.0.0.1:22")}
			if v := eng.Classify(headless); v.Action != P {
				t.Errorf("reloaded: VBoxHeadless (no longer caged) to 127.0.0.1:22: %v, want permit", v)
			}

			// Stop: Disarm first (then WinDivert closes, the process exits).
			if err := g.Disarm(); err != nil {
				t.Fatal(err)
			}
			svc.Exit()
			if v := eng.Classify(qemuOut); v.Action != B {
				t.Errorf("stopped: qemu to a public 443: %v, want block", v)
			}
			expect(t, eng, "stopped", ps[:1], installed)

			// router cleanup, from another process.
			n, err := New(eng.Process("router cleanup"), nil).Remove()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Error("cleanup removed no filter")
			}
			expect(t, eng, "after cleanup", ps, removed)
			if ours := owned(eng); len(ours) > 0 {
				t.Errorf("after cleanup the guard still has %v", ours)
			}
		})
	}
}

// owned lists what of the guard is left in eng.
func owned(eng *wfptest.Engine) []string {
	var out []string
	for _, f := range eng.Filters() {
		if f.Provider == ProviderKey {
			out = append(out, f.Name)
		}
	}
	for _, s := range eng.Sublayers() {
		if s.Key == SublayerKey {
			out = append(out, "sublayer")
		}
	}
	for _, p := range eng.Providers() {
		if p.Key == ProviderKey {
			out = append(out, "provider")
		}
	}
	return out
}

// TestHyperV: with an internal switch's subnet in the plan nothing from it is forwarded,
// in any state until the guard is removed.
func TestHyperV(t *testing.T) {
	eng := newMachine()
	env := baseEnv()
	env.CageSubnets = []netip.Prefix{netip.MustParsePrefix("172.30.16.0/20"), netip.MustParsePrefix("fd00:cafe::/64")}
	plan := mustPlan(t, env)
	flows := []wfptest.Flow{
		{Dir: wfptest.Forwarded, Proto: wfp.ProtoTCP, Local: ap("172.30.16.5:40000"), Remote: public},
		{Dir: wfptest.Forwarded, Proto: wfp.ProtoUDP, Local: ap("172.30.20.9:40000"), Remote: ap("8.8.8.8:53")},
		{Dir: wfptest.Forwarded, Proto: wfp.ProtoTCP, Local: ap("[fd00:cafe::5]:40000"), Remote: ap("[2001:db8::1]:443")},
	}
	other := wfptest.Flow{Dir: wfptest.Forwarded, Proto: wfp.ProtoTCP, Local: ap("10.9.0.5:40000"), Remote: public}
	check := func(state string) {
		t.Helper()
		for _, f := range flows {
			if v := eng.Classify(f); v.Action != B {
				t.Errorf("%s: %v: %v, want block", state, f, v)
			}
		}
		if v := eng.Classify(other); v.Action != P {
			t.Errorf("%s: %v (not a cage subnet): %v, want permit", state, other, v)
		}
	}
	p := eng.Process("router")
	g := New(p, nil)
	if _, err := g.Install(plan); err != nil {
		t.Fatal(err)
	}
	check("installed")
	eng.Reboot()
	check("boot")
	eng.Boot()
	check("booted")
	p = eng.Process("router")
	g = New(p, nil)
	if _, err := g.Install(plan); err != nil {
		t.Fatal(err)
	}
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	check("armed")
	p.Exit()
	check("crashed")
}

// TestInstallFailsAtomically: a failure in the middle of Install leaves the previous guard
// as it was, whether the new one adds or replaces.
func TestInstallFailsAtomically(t *testing.T) {
	eng := newMachine()
	plan := mustPlan(t, baseEnv())
	g := New(eng, nil)

	// First install fails at its third filter: nothing of the guard exists.
	adds := 0
	eng.SetFault(func(op wfptest.Op) error {
		if op.Name == "add-filter" {
			adds++
			if adds == 3 {
				return errors.New("out of memory")
			}
		}
		return nil
	})
	if _, err := g.Install(plan); !errors.Is(err, wfptest.ErrFault) {
		t.Fatalf("install: %v, want the injected fault", err)
	}
	if ours := owned(eng); len(ours) > 0 {
		t.Fatalf("a failed first install left %v", ours)
	}
	eng.SetFault(nil)
	if _, err := g.Install(plan); err != nil {
		t.Fatal(err)
	}
	before := eng.Filters()

	// A reload whose commit fails: the old filters are all there, unchanged.
	env2 := baseEnv()
	env2.CagedApps = []string{qemu}
	eng.SetFault(func(op wfptest.Op) error {
		if op.Name == "commit" {
			return errors.New("rpc failed")
		}
		return nil
	})
	if _, err := g.Install(mustPlan(t, env2)); err == nil {
		t.Fatal("install with a failing commit succeeded")
	}
	eng.SetFault(nil)
	if after := eng.Filters(); !slices.EqualFunc(before, after, func(a, b wfptest.Installed) bool { return a.Key == b.Key && a.Name == b.Name }) {
		t.Errorf("a failed reload changed the filters")
	}
	expect(t, eng, "after a failed reload", probes(false), installed)
}

// TestArmFailure: Arm that fails adds no permit and keeps no session: the caged apps stay
// blocked, and the daemon must exit.
func TestArmFailure(t *testing.T) {
	eng := newMachine()
	g := New(eng, nil)
	if err := g.Arm(); err == nil {
		t.Fatal("arm before install succeeded")
	}
	if _, err := g.Install(mustPlan(t, baseEnv())); err != nil {
		t.Fatal(err)
	}
	eng.SetFault(func(op wfptest.Op) error {
		if op.Name == "add-filter" {
			return errors.New("refused")
		}
		return nil
	})
	if err := g.Arm(); err == nil {
		t.Fatal("arm with a failing add succeeded")
	}
	eng.SetFault(nil)
	if g.Armed() {
		t.Error("a failed arm left the guard armed")
	}
	for _, s := range eng.Sessions() {
		if s.Dynamic() {
			t.Error("a failed arm left its dynamic session open")
		}
	}
	expect(t, eng, "after a failed arm", probes(false), installed)
}

// TestDisarmWithFailingEngine: even when deleting the permits fails, Disarm closes the
// dynamic session and the permits are gone.
func TestDisarmWithFailingEngine(t *testing.T) {
	eng := newMachine()
	g := New(eng, nil)
	if _, err := g.Install(mustPlan(t, baseEnv())); err != nil {
		t.Fatal(err)
	}
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	eng.SetFault(func(op wfptest.Op) error {
		if op.Name == "delete-filter" || op.Name == "begin" {
			return errors.New("engine busy")
		}
		return nil
	})
	if err := g.Disarm(); err == nil {
		t.Error("disarm hid the engine's error")
	}
	eng.SetFault(nil)
	expect(t, eng, "after a failed disarm", probes(false), installed)
	if err := g.Disarm(); err != nil {
		t.Errorf("second disarm: %v", err)
	}
}

// TestReinstallReplaces: installing from scratch over an older guard (other filters, an
// older sublayer weight) leaves exactly the new plan, never duplicates.
func TestReinstallReplaces(t *testing.T) {
	eng := newMachine()
	g := New(eng, nil)
	old := mustPlan(t, Env{CagedApps: []string{vboxVM}, Router: routerExe, DNSAll: true})
	old.Sublayer.Weight = 0x100
	if _, err := g.Install(old); err != nil {
		t.Fatal(err)
	}
	plan := mustPlan(t, baseEnv())
	if _, err := New(eng, nil).Install(plan); err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, f := range eng.Filters() {
		if f.Provider == ProviderKey {
			got = append(got, f.Key.String())
		}
	}
	for _, f := range plan.Persistent {
		want = append(want, f.Key.String())
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("filters after reinstall:\n%v\nwant\n%v", got, want)
	}
	for _, s := range eng.Sublayers() {
		if s.Key == SublayerKey && s.Weight != SublayerWeight {
			t.Errorf("sublayer weight %#x, want %#x", s.Weight, SublayerWeight)
		}
	}
}

// TestRemoveWhileRunning: cleanup from another process while the service is armed removes
// the service's permits too; the service's later Disarm is harmless.
func TestRemoveWhileRunning(t *testing.T) {
	eng := newMachine()
	svc := eng.Process("router service")
	g := New(svc, nil)
	if _, err := g.Install(mustPlan(t, baseEnv())); err != nil {
		t.Fatal(err)
	}
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(eng.Process("router cleanup"), nil).Remove(); err != nil {
		t.Fatal(err)
	}
	if ours := owned(eng); len(ours) > 0 {
		t.Errorf("left: %v", ours)
	}
	if err := g.Disarm(); err != nil {
		t.Errorf("disarm after cleanup: %v", err)
	}
	if n, err := New(eng, nil).Remove(); err != nil || n != 0 {
		t.Errorf("remove with nothing installed: %d, %v", n, err)
	}
}

// TestUnresolvableApp: an app Windows cannot name is left out (and reported) instead of
// failing the whole guard.
func TestUnresolvableApp(t *testing.T) {
	eng := newMachine()
	eng.SetMissing(vboxHeadless, true)
	g := New(eng, nil)
	rep, err := g.Install(mustPlan(t, baseEnv()))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Unresolvable, []string{vboxHeadless}) {
		t.Errorf("unresolvable %v", rep.Unresolvable)
	}
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	expect(t, eng, "armed", probes(false), armed)
}

// TestEngineUnavailable: without a filtering engine Install fails with ErrUnavailable.
func TestEngineUnavailable(t *testing.T) {
	eng := newMachine()
	eng.Reboot() // boot phase: BFE not running
	if _, err := New(eng, nil).Install(mustPlan(t, baseEnv())); !errors.Is(err, wfp.ErrUnavailable) {
		t.Errorf("got %v, want ErrUnavailable", err)
	}
}

// TestStates names every state in which the router is not running and shows the guard
// holds in it: each starts from a machine where the service was installed and ran, and
// does what that state does to the engine.
func TestStates(t *testing.T) {
	plan := mustPlan(t, baseEnv())
	states := []struct {
		name string
		do   func(t *testing.T, eng *wfptest.Engine, svc *wfptest.Process, g *Guard)
		want func(probe) wfp.Action
	}{
		{"crash (taskkill /F)", func(t *testing.T, _ *wfptest.Engine, svc *wfptest.Process, _ *Guard) { svc.Exit() }, installed},
		{"stop (Disarm, close WinDivert, exit)", func(t *testing.T, _ *wfptest.Engine, svc *wfptest.Process, g *Guard) {
			if err := g.Disarm(); err != nil {
				t.Fatal(err)
			}
			svc.Exit()
		}, installed},
		{"engine read error (Disarm first, exit 1)", func(t *testing.T, _ *wfptest.Engine, svc *wfptest.Process, g *Guard) {
			if err := g.Disarm(); err != nil {
				t.Fatal(err)
			}
			svc.Exit()
		}, installed},
		{"restart window, then a bad config (the new process fails before Install)", func(t *testing.T, eng *wfptest.Engine, svc *wfptest.Process, _ *Guard) {
			svc.Exit()
			eng.Process("router, restarted with a broken config").Exit()
		}, installed},
		{"driver refused (Install done, WinDivert refused, exit before Arm)", func(t *testing.T, eng *wfptest.Engine, svc *wfptest.Process, _ *Guard) {
			svc.Exit()
			p := eng.Process("router, restarted")
			if _, err := New(p, nil).Install(plan); err != nil {
				t.Fatal(err)
			}
			p.Exit()
		}, installed},
		{"boot, before the BFE", func(t *testing.T, eng *wfptest.Engine, _ *wfptest.Process, _ *Guard) { eng.Reboot() }, boot},
		{"boot, the service not started yet", func(t *testing.T, eng *wfptest.Engine, _ *wfptest.Process, _ *Guard) {
			eng.Reboot()
			eng.Boot()
		}, installed},
	}
	for _, st := range states {
		t.Run(st.name, func(t *testing.T) {
			eng := newMachine()
			svc := eng.Process("router service")
			g := New(svc, nil)
			if _, err := g.Install(plan); err != nil {
				t.Fatal(err)
			}
			if err := g.Arm(); err != nil {
				t.Fatal(err)
			}
			st.do(t, eng, svc, g)
			expect(t, eng, st.name, probes(false), st.want)
		})
	}
}

// TestCagedUDP: with CagedUDP given, a caged app's UDP passes to the capture only to those
// ports while the router runs (DNS and a direct rule's port here), its TCP to any; the
// host's other apps are not the guard's business.
func TestCagedUDP(t *testing.T) {
	eng := newMachine()
	env := baseEnv()
	env.CagedUDP = []wfp.PortRange{wfp.Port(53), {From: 3478, To: 3479}}
	p := eng.Process("router")
	g := New(p, nil)
	if _, err := g.Install(mustPlan(t, env)); err != nil {
		t.Fatal(err)
	}
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	out := func(app string, proto uint8, remote string) wfptest.Flow {
		return wfptest.Flow{Dir: wfptest.Outbound, App: app, Proto: proto, Local: ap("192.168.1.10:50000"), Remote: ap(remote)}
	}
	for _, c := range []struct {
		f    wfptest.Flow
		want wfp.Action
	}{
		{out(vboxVM, wfp.ProtoUDP, "8.8.8.8:53"), P},
		{out(vboxVM, wfp.ProtoUDP, "203.0.113.9:3479"), P},
		{out(vboxVM, wfp.ProtoUDP, "203.0.113.9:443"), B}, // QUIC: the capture would drop it
		{out(vboxVM, wfp.ProtoTCP, "203.0.113.9:443"), P},
		{out(chrome, wfp.ProtoUDP, "203.0.113.9:443"), P},
	} {
		if v := eng.Classify(c.f); v.Action != c.want {
			t.Errorf("%v: %v, want %v", c.f, v, c.want)
		}
	}
}
