package platform

import (
	_ "embed"
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/capture/capturetest"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/guard"
	"github.com/agentcage/router/windivert/wfp/wfptest"
)

// windowsCfg is the Windows config these tests start from: VirtualBox (a preset) caged, its
// flows through the proxy, the rest direct.
//
//go:embed testdata/windows.toml
var windowsCfg string

// TestWindowsRivals: a kill switch above the guard is reported at start and in status.
// WireGuard's (soft permits, one hard permit for wireguard.exe) defeats nothing: even with
// rival_permits = "refuse" the router starts, and status says what its block breaks. One
// with hard tunnel and loopback permits is refused, named, with "refuse".
func TestWindowsRivals(t *testing.T) {
	for _, tc := range []struct {
		name         string
		hard, refuse bool
		want         string
	}{
		{"wireguard, warn", false, false, "no hard permit reaches the caged apps"},
		{"wireguard, refuse", false, true, "no hard permit reaches the caged apps"},
		{"hard, warn", true, false, "hard permits"},
		{"hard, refuse", true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newWindowsScene(t)
			name := "WireGuard filters"
			if tc.hard {
				s.wfp.HardKillSwitch(0x77)
				name = "HardVPN filters"
			} else {
				s.wfp.KillSwitch(0x77)
			}
			text := windowsCfg
			if tc.refuse {
				text = strings.Replace(text, "[capture]\n", "[capture]\nrival_permits = \"refuse\"\n", 1)
			}
			cfg := capturetest.ParseWindows(t, text)
			err := s.p.Install(cfg, policy.New(cfg, s.p.Env()), nil)
			if tc.hard && tc.refuse {
				if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "rival_permits") {
					t.Errorf("refuse: Install = %v, want refused naming the kill switch and the option", err)
				}
				if n, _ := guard.Permits(s.wfp, 0); n != 0 || s.openHandles() != 0 {
					t.Errorf("refused, yet %d permits and %d handles", n, s.openHandles())
				}
				return
			}
			if err != nil {
				t.Fatalf("Install = %v", err)
			}
			rs := s.p.GuardStatus().Rivals
			if len(rs) != 1 || !strings.Contains(rs[0], name) || !strings.Contains(rs[0], tc.want) || !strings.Contains(rs[0], "redirected connections") {
				t.Errorf("status rivals = %q, want %s's, with %q and what its block breaks", rs, name, tc.want)
			}
			s.p.Close()
		})
	}
}

// pidInfo is a resolver that knows a few processes.
type pidInfo map[uint32]rules.Owner

func (m pidInfo) ByPID(pid uint32) (rules.Owner, error) {
	if i, ok := m[pid]; ok {
		return i, nil
	}
	return rules.Owner{}, errors.New("no such process")
}

// TestWindowsGuardsSeenImage: a portable VirtualBox runs from a path the guard's lookup does
// not know; once the engine resolves its process, the guard blocks that path too, so it
// stays caged after the router stops, and status lists it.
func TestWindowsGuardsSeenImage(t *testing.T) {
	const portable = `D:\tools\VirtualBox\VirtualBoxVM.exe`
	s := newWindowsScene(t)
	s.p.deps.Resolver = pidInfo{42: {App: "VirtualBoxVM.exe", AppPath: portable}, 43: {App: "chrome.exe", AppPath: `C:\chrome\chrome.exe`}}
	seen := filepath.Join(t.TempDir(), "guarded-apps.txt")
	s.p.deps.SeenFile = seen
	cfg := capturetest.ParseWindows(t, windowsCfg)
	if err := s.p.Install(cfg, policy.New(cfg, s.p.Env()), nil); err != nil {
		t.Fatal(err)
	}
	flow := func(app string) wfptest.Flow {
		return wfptest.Flow{Dir: wfptest.Outbound, App: app, Proto: wfp.ProtoUDP, Local: netip.MustParseAddrPort("192.168.1.10:5000"), Remote: netip.MustParseAddrPort("203.0.113.10:3478")}
	}
	if slices.Contains(s.p.GuardStatus().GuardedApps, portable) {
		t.Fatal("the portable copy is guarded before it was seen: the test tests nothing")
	}
	if s.p.udp != nil {
		t.Errorf("UDP narrowed to %v while caged names are unguarded", s.p.udp)
	}
	for _, pid := range []uint32{42, 43} {
		if _, err := s.p.resolver().ByPID(pid); err != nil {
			t.Fatal(err)
		}
	}
	if !wait.Poll(5*time.Second, func() bool { return slices.Contains(s.p.GuardStatus().GuardedApps, portable) }) {
		t.Fatalf("the portable copy never got guarded: %q", s.p.GuardStatus().GuardedApps)
	}
	if slices.ContainsFunc(s.p.GuardStatus().GuardedApps, func(a string) bool { return strings.Contains(a, "chrome") }) {
		t.Error("an uncaged process got guarded")
	}
	if err := s.p.Close(); err != nil {
		t.Fatal(err)
	}
	if v := s.wfp.Classify(flow(portable)); v.Action != wfp.Block {
		t.Errorf("router stopped: the portable VirtualBox's UDP %v, want blocked", v)
	}
	if v := s.wfp.Classify(flow(`C:\chrome\chrome.exe`)); v.Action != wfp.Permit {
		t.Errorf("router stopped: chrome's UDP %v, want untouched", v)
	}

	// The next start guards it from the first moment, before it is seen again.
	deps := s.p.deps
	deps.Resolver = nil
	next := newRedirectPlatform(nil, deps)
	if err := next.Install(cfg, policy.New(cfg, next.Env()), nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(next.GuardStatus().GuardedApps, portable) {
		t.Errorf("restart: %q not guarded (%s kept?)", portable, seen)
	}
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
	if v := s.wfp.Classify(flow(portable)); v.Action != wfp.Block {
		t.Errorf("stopped after a restart: the portable VirtualBox's UDP %v, want blocked", v)
	}
}

// TestWindowsGuardsServices: a block rule naming a service is guarded by the service's SID:
// its process is blocked while the router is stopped and passed to the capture while it runs.
func TestWindowsGuardsServices(t *testing.T) {
	s := newWindowsScene(t)
	cfg := capturetest.ParseWindows(t, windowsCfg+"[[rule]]\nname = \"nat\"\nservices = [\"SharedAccess\"]\naction = \"block\"\n")
	if err := s.p.Install(cfg, policy.New(cfg, s.p.Env()), nil); err != nil {
		t.Fatal(err)
	}
	f := wfptest.Flow{Dir: wfptest.Outbound, App: `C:\Windows\System32\svchost.exe`, SIDs: []string{guard.ServiceSID("SharedAccess")}, Proto: wfp.ProtoTCP,
		Local: netip.MustParseAddrPort("192.168.1.10:5000"), Remote: netip.MustParseAddrPort("203.0.113.10:443")}
	if v := s.wfp.Classify(f); v.Action != wfp.Permit {
		t.Errorf("running: the service's flow %v, want passed to the capture", v)
	}
	if err := s.p.Close(); err != nil {
		t.Fatal(err)
	}
	if v := s.wfp.Classify(f); v.Action != wfp.Block {
		t.Errorf("stopped: the service's flow %v, want blocked", v)
	}
	other := f
	other.SIDs = []string{guard.ServiceSID("Dnscache")}
	if v := s.wfp.Classify(other); v.Action != wfp.Permit {
		t.Errorf("stopped: another service's flow %v, want untouched", v)
	}
}

// TestWindowsGuardWatched: another tool deletes one of the guard's persistent blocks and one
// of its permits while the router runs: the router restores both and counts the restore.
func TestWindowsGuardWatched(t *testing.T) {
	s := newWindowsScene(t)
	s.p.deps.WatchEvery = 5 * time.Millisecond
	cfg := capturetest.ParseWindows(t, windowsCfg)
	if err := s.p.Install(cfg, policy.New(cfg, s.p.Env()), nil); err != nil {
		t.Fatal(err)
	}
	defer s.p.Close()
	before, permits := s.persistent(), s.dynamic()
	other, err := s.wfp.Process("another tool").Open(wfp.SessionOptions{Name: "cleanup script"})
	if err != nil {
		t.Fatal(err)
	}
	var gone []string
	for _, f := range s.wfp.Filters() {
		if f.Provider != guard.ProviderKey {
			continue
		}
		if (f.Lifetime == wfptest.Dynamic && len(gone) == 1) || (f.Lifetime != wfptest.Dynamic && len(gone) == 0) {
			if err := other.DeleteFilter(f.Key); err != nil {
				t.Fatal(err)
			}
			gone = append(gone, f.Name)
		}
	}
	other.Close()
	if !wait.Poll(5*time.Second, func() bool { return s.persistent() >= before && s.dynamic() >= permits }) {
		t.Fatalf("not restored: %d of %d blocks, %d of %d permits (deleted %q)", s.persistent(), before, s.dynamic(), permits, gone)
	}
	st := s.p.GuardStatus()
	if !st.Watched || st.Restores < 1 || st.LastDamage == "" {
		t.Errorf("status %+v, want a restore counted with its damage", st)
	}
}
