package guard

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/wfptest"
)

// TestInboundPermits: an explicit proxy on a Hyper-V internal switch's address takes its
// allowed guests while the router runs and no other source in any state; a caged app may
// reach its port on this machine like a forward's.
func TestInboundPermits(t *testing.T) {
	eng := newMachine()
	eng.SetHostAddrs(hostLAN, hostOnly, netip.MustParseAddr("172.30.16.1"))
	env := baseEnv()
	env.Inbounds = []Inbound{
		{Listen: ap("172.30.16.1:1080"), Allow: []netip.Prefix{netip.MustParsePrefix("172.30.16.0/20")}},
		{Listen: ap("[::]:3128"), Allow: []netip.Prefix{netip.MustParsePrefix("fd00:cafe::/64")}},
	}
	plan := mustPlan(t, env)
	in := func(local, remote string) wfptest.Flow {
		return wfptest.Flow{Dir: wfptest.Inbound, App: routerExe, SIDs: routerSIDs, Proto: wfp.ProtoTCP, Local: ap(local), Remote: ap(remote)}
	}
	ps := []probe{
		{"socks inbound from an allowed guest", in("172.30.16.1:1080", "172.30.16.5:40000"), B, B, P, B},
		{"socks inbound from the LAN", in("172.30.16.1:1080", "192.168.1.77:40000"), B, B, B, B},
		{"socks inbound's port on another host address", in("192.168.1.10:1080", "172.30.16.5:40000"), B, B, B, B},
		{"http inbound on :: from an allowed v6 guest", in("[fd00:cafe::1]:3128", "[fd00:cafe::5]:40000"), B, B, P, B},
		{"http inbound from a v4 guest", in("172.30.16.1:3128", "172.30.16.5:40000"), B, B, B, B},
		{"the forward still from its guests", in("192.168.56.1:47831", "192.168.56.101:40000"), B, B, P, B},
		{"vbox to the inbound's port on this machine", wfptest.Flow{Dir: wfptest.Outbound, App: vboxVM, Proto: wfp.ProtoTCP,
			Local: ap("192.168.1.10:50000"), Remote: ap("172.30.16.1:1080")}, P, B, P, P},
	}
	svc := eng.Process("router service")
	g := New(svc, nil)
	if _, err := g.Install(plan); err != nil {
		t.Fatal(err)
	}
	expect(t, eng, "installed", ps, installed)
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	expect(t, eng, "armed", ps, armed)
	svc.Exit()
	expect(t, eng, "after a crash", ps, installed)
}

func TestInboundPlanRejects(t *testing.T) {
	env := baseEnv()
	env.Inbounds = []Inbound{{Listen: ap("172.30.16.1:47100")}, {Listen: netip.AddrPort{}}, {Listen: ap("172.30.16.1:1080"), Allow: []netip.Prefix{{}}}}
	_, err := NewPlan(env)
	for _, want := range []string{"inbound 172.30.16.1:47100 shares its port with the router's listener", "inbound listen address invalid AddrPort", "inbound 172.30.16.1:1080: invalid allowed source"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewPlan = %v; want it to say %q", err, want)
		}
	}
}
