package guard

import (
	"testing"

	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/wfptest"
)

// TestPortForwardsWalled: a hypervisor's NAT port forward (VirtualBox's NAT rule host
// 0.0.0.0:2222 -> guest 22 listens in VirtualBoxVM.exe; VMware's in vmnat.exe) takes no
// connection from another machine in any state, even with a Windows Firewall rule allowing
// the hypervisor; this host's own connection to it still works.
func TestPortForwardsWalled(t *testing.T) {
	eng := newMachine()
	fw := eng.WindowsFirewall()
	for _, l := range []wfp.Layer{wfp.LayerAcceptV4, wfp.LayerAcceptV6} {
		fw.Allow("VirtualBox "+l.String(), l, wfp.App(vboxVM))
	}
	lan := wfptest.Flow{Dir: wfptest.Inbound, App: vboxVM, Proto: wfp.ProtoTCP, Local: ap("192.168.1.10:2222"), Remote: ap("192.168.1.77:50000")}
	local := wfptest.Flow{Dir: wfptest.Inbound, App: vboxVM, Proto: wfp.ProtoTCP, Local: ap("127.0.0.1:2222"), Remote: ap("127.0.0.1:50000")}
	if v := eng.Classify(lan); v.Action != wfp.Permit {
		t.Fatalf("without the guard, a LAN connection to the port forward %v: the test tests nothing", v)
	}
	g := New(eng, nil)
	if _, err := g.Install(mustPlan(t, baseEnv())); err != nil {
		t.Fatal(err)
	}
	check := func(state string) {
		t.Helper()
		if v := eng.Classify(lan); v.Action != wfp.Block {
			t.Errorf("%s: a LAN connection to VirtualBox's port forward %v, want blocked", state, v)
		}
		if v := eng.Classify(local); v.Action != wfp.Permit {
			t.Errorf("%s: this host's connection to the port forward %v, want permitted", state, v)
		}
	}
	check("stopped")
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	check("running")
}
