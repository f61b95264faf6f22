package platform

import (
	"strings"
	"testing"

	"github.com/agentcage/router/router/capture/capturetest"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/windivert/adapters"
	"github.com/agentcage/router/windivert/adapters/adapterstest"
	"github.com/agentcage/router/windivert/wfp/guard"
)

// TestWindowsRefusesUncagedAdapters: a Default Switch (WinNAT in the kernel: no capture
// sees its guests) or a host-only adapter with ICS refuses the start, before anything is
// installed, unless the config accepts it; WSL's adapter closed by the Hyper-V firewall
// (default outbound Block) and an Internal switch in cage_subnets do not.
func TestWindowsRefusesUncagedAdapters(t *testing.T) {
	defSwitch, wsl, ics, closedWSL := adapterstest.DefaultSwitch(), adapterstest.WSL(), adapterstest.HostOnlyICS(), adapterstest.ClosedWSL()
	for _, tc := range []struct {
		name   string
		as     []adapters.Adapter
		wsl    adapters.WSL
		accept bool
		refuse string // what the refusal names; "" starts
	}{
		{"default switch", []adapters.Adapter{defSwitch}, adapters.WSL{}, false, "vEthernet (Default Switch)"},
		{"default switch accepted", []adapters.Adapter{defSwitch}, adapters.WSL{}, true, ""},
		{"wsl open", []adapters.Adapter{wsl}, adapters.WSL{}, false, "vEthernet (WSL)"},
		{"wsl closed by the Hyper-V firewall", []adapters.Adapter{wsl}, closedWSL, false, ""},
		{"host-only with ICS", []adapters.Adapter{ics}, adapters.WSL{}, false, "VirtualBox Host-Only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newWindowsScene(t)
			s.p.deps.Adapters = func() ([]adapters.Adapter, error) { return tc.as, nil }
			s.p.deps.WSL = func() (adapters.WSL, error) { return tc.wsl, nil }
			text := windowsCfg
			if tc.accept {
				text = strings.Replace(text, "[capture]\n", "[capture]\nuncaged_adapters = \"accept\"\n", 1)
			}
			cfg := capturetest.ParseWindows(t, text)
			err := s.p.Install(cfg, policy.New(cfg, s.p.Env()), nil)
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("Install = %v, want started", err)
				}
				s.p.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.refuse) || !strings.Contains(err.Error(), "uncaged_adapters") {
				t.Errorf("Install = %v, want refused naming %q and the option", err, tc.refuse)
			}
			if n, _ := guard.Permits(s.wfp, 0); n != 0 || s.openHandles() != 0 {
				t.Errorf("refused, yet %d permits and %d handles", n, s.openHandles())
			}
		})
	}
}
