package platform

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentcage/router/router/capture/capturetest"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/wfptest"
)

// TestWindowsNeverGuardsSvchost: a config that cages svchost.exe by name (what a Proxifier
// profile's hypervisor rule imports to) never puts System32\svchost.exe in the persistent
// guard, neither when a svchost flow is seen nor by its path: with the router stopped the
// host's services (DHCP, DNS, Windows Update, time sync) keep their network.
func TestWindowsNeverGuardsSvchost(t *testing.T) {
	const svchost = `C:\Windows\System32\svchost.exe`
	for _, apps := range []string{`"svchost.exe"`, `'C:\Windows\System32\svchost.exe'`} {
		t.Run(apps, func(t *testing.T) {
			s := newWindowsScene(t)
			s.p.deps.Resolver = pidInfo{42: {App: "svchost.exe", AppPath: svchost, Services: []string{"Dhcp"}}}
			seen := filepath.Join(t.TempDir(), "guarded-apps.txt")
			s.p.deps.SeenFile = seen
			cfg := capturetest.ParseWindows(t, strings.Replace(windowsCfg, "[[rule]]\nname = \"default\"", "[[rule]]\nname = \"hosts\"\napps = ["+apps+"]\naction = \"proxy\"\n[[rule]]\nname = \"default\"", 1))
			if err := s.p.Install(cfg, policy.New(cfg, s.p.Env()), nil); err != nil {
				t.Fatal(err)
			}
			if _, err := s.p.resolver().ByPID(42); err != nil {
				t.Fatal(err)
			}
			s.p.appsMu.Lock()
			extra := len(s.p.extra)
			s.p.appsMu.Unlock()
			if extra != 0 || slices.ContainsFunc(s.p.GuardStatus().GuardedApps, func(a string) bool { return strings.EqualFold(a, svchost) }) {
				t.Errorf("svchost.exe guarded by path: seen %d, guarded %q", extra, s.p.GuardStatus().GuardedApps)
			}
			if err := s.p.Close(); err != nil {
				t.Fatal(err)
			}
			f := wfptest.Flow{Dir: wfptest.Outbound, App: svchost, Proto: wfp.ProtoUDP, Local: netip.MustParseAddrPort("192.168.1.10:68"), Remote: netip.MustParseAddrPort("192.168.1.1:67")}
			if v := s.wfp.Classify(f); v.Action != wfp.Permit {
				t.Errorf("router stopped: the DHCP client's svchost %v, want untouched", v)
			}
		})
	}
}
