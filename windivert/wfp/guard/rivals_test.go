package guard

import (
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
