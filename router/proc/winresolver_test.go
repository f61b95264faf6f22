package proc_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/router/proc/proctest"
	"github.com/agentcage/router/rules"
)

// countingProcs wraps proctest.Processes, counts calls and lets a test change the table.
type countingProcs struct {
	mu      sync.Mutex
	t       proctest.Processes
	created int
	paths   int
}

func (c *countingProcs) Created(pid uint32) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.created++
	return c.t.Created(pid)
}

func (c *countingProcs) ImagePath(pid uint32) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paths++
	return c.t.ImagePath(pid)
}

func (c *countingProcs) set(pid uint32, p proctest.Process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t[pid] = p
}

type countingSCM struct {
	mu    sync.Mutex
	t     proctest.Services
	err   error
	calls int
}

func (c *countingSCM) ServicesByPID() (map[uint32][]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.err != nil {
		return nil, c.err
	}
	return c.t.ServicesByPID()
}

func (c *countingSCM) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// winClock is a settable fake winClock.
type winClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *winClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *winClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

var winT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newTestWindowsResolver() (*proc.WindowsResolver, *countingProcs, *countingSCM, *winClock) {
	procs := &countingProcs{t: proctest.Processes{
		1000: {Created: winT0.Add(-time.Hour), Path: `C:\Program Files\Oracle\VirtualBox\VirtualBoxVM.exe`},
		1572: {Created: winT0.Add(-2 * time.Hour), Path: `C:\Windows\System32\svchost.exe`},
		1600: {Created: winT0.Add(-2 * time.Hour), Path: `C:\WINDOWS\system32\SvcHost.EXE`},
		2000: {Created: winT0.Add(-time.Hour), Path: `C:\Program Files (x86)\VMware\VMware Workstation\vmnat.exe`},
	}}
	scm := &countingSCM{t: proctest.Services{
		1572: {"iphlpsvc"},
		1600: {"SharedAccess", "Dnscache", "nsi"},
		2000: {"VMware NAT Service"},
	}}
	c := &winClock{t: winT0}
	r := proc.NewWindowsResolver(procs, scm, proc.WindowsOptions{Now: c.now})
	return r, procs, scm, c
}

func TestByPID(t *testing.T) {
	r, _, _, _ := newTestWindowsResolver()
	tests := []struct {
		name string
		pid  uint32
		want rules.Owner
	}{
		{"app", 1000, rules.Owner{PID: 1000, App: "VirtualBoxVM.exe", AppPath: `C:\Program Files\Oracle\VirtualBox\VirtualBoxVM.exe`}},
		{"svchost", 1572, rules.Owner{PID: 1572, App: "svchost.exe", AppPath: `C:\Windows\System32\svchost.exe`, Services: []string{"iphlpsvc"}}},
		{"svchost case, sorted services", 1600, rules.Owner{PID: 1600, App: "SvcHost.EXE", AppPath: `C:\WINDOWS\system32\SvcHost.EXE`, Services: []string{"Dnscache", "SharedAccess", "nsi"}}},
		{"service in its own exe: no services (not svchost)", 2000, rules.Owner{PID: 2000, App: "vmnat.exe", AppPath: `C:\Program Files (x86)\VMware\VMware Workstation\vmnat.exe`}},
		{"system", 4, rules.Owner{PID: 4, App: "System"}},
		{"idle", 0, rules.Owner{PID: 0, App: "System Idle Process"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.ByPID(tt.pid)
			if err != nil {
				t.Fatal(err)
			}
			if got.PID != tt.want.PID || got.App != tt.want.App || got.AppPath != tt.want.AppPath || !slices.Equal(got.Services, tt.want.Services) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	t.Run("no such process", func(t *testing.T) {
		_, err := r.ByPID(31337)
		if !errors.Is(err, proc.ErrNoProcess) {
			t.Errorf("err = %v, want proc.ErrNoProcess", err)
		}
	})
}

func TestCacheAndPIDReuse(t *testing.T) {
	r, procs, _, _ := newTestWindowsResolver()
	for i := 0; i < 3; i++ {
		if _, err := r.ByPID(1000); err != nil {
			t.Fatal(err)
		}
	}
	if procs.paths != 1 || procs.created != 3 {
		t.Errorf("ImagePath calls = %d, Created calls = %d; want 1, 3", procs.paths, procs.created)
	}
	// PID 1000 exits and is reused by another program.
	procs.set(1000, proctest.Process{Created: winT0, Path: `C:\Users\me\evil.exe`})
	p, err := r.Lookup(1000)
	if err != nil {
		t.Fatal(err)
	}
	if p.Owner.App != "evil.exe" || !p.Created.Equal(winT0) {
		t.Errorf("after reuse got %q created %v, want evil.exe created %v", p.Owner.App, p.Created, winT0)
	}
	if procs.paths != 2 {
		t.Errorf("ImagePath calls = %d, want 2", procs.paths)
	}
	// The process is gone: the entry is forgotten.
	procs.mu.Lock()
	delete(procs.t, 1000)
	procs.mu.Unlock()
	if _, err := r.ByPID(1000); !errors.Is(err, proc.ErrNoProcess) {
		t.Errorf("gone process: err = %v", err)
	}
}

func TestServiceSnapshotRefresh(t *testing.T) {
	r, procs, scm, c := newTestWindowsResolver()
	r.ByPID(1572)
	r.ByPID(1600)
	if got := scm.n(); got != 1 {
		t.Fatalf("SCM enumerations after two svchost lookups = %d, want 1", got)
	}
	// A new svchost appears; the snapshot is from before it started.
	c.add(5 * time.Second)
	procs.set(1700, proctest.Process{Created: c.now(), Path: `C:\Windows\System32\svchost.exe`})
	scm.mu.Lock()
	scm.t[1700] = []string{"WinDivertTest"}
	scm.mu.Unlock()
	c.add(time.Millisecond)
	info, _ := r.ByPID(1700)
	if !slices.Equal(info.Services, []string{"WinDivertTest"}) || scm.n() != 2 {
		t.Errorf("new svchost: services %v after %d enumerations, want [WinDivertTest] after 2", info.Services, scm.n())
	}
	// Within ServicesMinInterval an unknown svchost does not cause another enumeration.
	procs.set(1800, proctest.Process{Created: c.now(), Path: `C:\Windows\System32\svchost.exe`})
	info, _ = r.ByPID(1800)
	if scm.n() != 2 || len(info.Services) != 0 {
		t.Errorf("rate limit: %d enumerations, services %v; want 2, none", scm.n(), info.Services)
	}
	// A service starts inside a shared svchost; seen once the snapshot is older than MaxAge.
	scm.mu.Lock()
	scm.t[1572] = []string{"iphlpsvc", "WinHttpAutoProxySvc"}
	scm.mu.Unlock()
	c.add(10 * time.Second)
	info, _ = r.ByPID(1572)
	if len(info.Services) != 1 {
		t.Errorf("within max age: services %v, want the cached [iphlpsvc]", info.Services)
	}
	c.add(31 * time.Second)
	info, _ = r.ByPID(1572)
	if !slices.Equal(info.Services, []string{"WinHttpAutoProxySvc", "iphlpsvc"}) {
		t.Errorf("after max age: services %v", info.Services)
	}
	// Enumeration failing: the last snapshot answers.
	scm.mu.Lock()
	scm.err = fmt.Errorf("access denied")
	scm.mu.Unlock()
	c.add(time.Minute)
	info, err := r.ByPID(1600)
	if err != nil || len(info.Services) != 3 {
		t.Errorf("with SCM failing: %v %v, want the previous 3 services", info.Services, err)
	}
}

func TestEviction(t *testing.T) {
	procs := proctest.Processes{}
	for pid := uint32(8); pid < 8+100; pid++ {
		procs[pid] = proctest.Process{Created: winT0, Path: fmt.Sprintf(`C:\p%d.exe`, pid)}
	}
	r := proc.NewWindowsResolver(procs, proctest.Services{}, proc.WindowsOptions{MaxEntries: 16})
	for pid := uint32(8); pid < 8+100; pid++ {
		info, err := r.ByPID(pid)
		if err != nil || info.App != fmt.Sprintf("p%d.exe", pid) {
			t.Fatalf("pid %d: %+v %v", pid, info, err)
		}
	}
	if n := r.CachedEntries(); n > 16 {
		t.Errorf("cache holds %d entries, want at most 16", n)
	}
}

func TestConcurrentLookups(t *testing.T) {
	r, _, scm, _ := newTestWindowsResolver()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				for _, pid := range []uint32{1000, 1572, 1600, 2000, 4} {
					if _, err := r.ByPID(pid); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := scm.n(); n != 1 {
		t.Errorf("SCM enumerated %d times under concurrent lookups, want 1", n)
	}
}

// TestByPIDAt: a process created after the moment its PID was seen (a socket event) is not
// the one that was seen: Windows reused the PID.
func TestByPIDAt(t *testing.T) {
	seen := time.Unix(1_700_000_000, 0)
	r := proc.NewWindowsResolver(proctest.Processes{
		10: {Created: seen.Add(-time.Hour), Path: `C:\Program Files\Oracle\VirtualBox\VirtualBoxVM.exe`},
		11: {Created: seen.Add(time.Second), Path: `C:\Windows\System32\notepad.exe`},
	}, proctest.Services{}, proc.WindowsOptions{})
	if info, err := r.ByPIDAt(10, seen); err != nil || info.App != "VirtualBoxVM.exe" {
		t.Errorf("the process seen: %+v, %v", info, err)
	}
	if info, err := r.ByPIDAt(11, seen); err == nil {
		t.Errorf("a PID reused since the event gave %+v", info)
	}
	if info, err := r.ByPIDAt(11, time.Time{}); err != nil || info.App != "notepad.exe" {
		t.Errorf("no moment given: %+v, %v", info, err)
	}
}
