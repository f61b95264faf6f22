package proc

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// These tests use the real OS: under Wine, the Wine prefix's processes and its Service
// Control Manager (which runs the Eventlog service in svchost.exe).

func TestOSProcessesSelf(t *testing.T) {
	var q OSProcesses
	pid := uint32(os.Getpid())
	created, err := q.Created(pid)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(created); d < 0 || d > time.Hour {
		t.Errorf("own creation time %v is %v ago", created, d)
	}
	path, err := q.ImagePath(pid)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	if !strings.EqualFold(filepath.Base(path), filepath.Base(exe)) {
		t.Errorf("ImagePath = %q, os.Executable = %q", path, exe)
	}
	if _, err := q.Created(0x7ffffff0); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Created(unused pid) = %v, want ErrNoProcess", err)
	}
}

func TestSCMFindsSvchostServices(t *testing.T) {
	m, err := SCM{}.ServicesByPID()
	if err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		t.Fatal("the Service Control Manager lists no running Win32 service")
	}
	r := NewSystemWindowsResolver(nil)
	found := false
	for pid, names := range m {
		info, err := r.ByPID(pid)
		if err != nil {
			t.Errorf("ByPID(%d) hosting %v: %v", pid, names, err)
			continue
		}
		t.Logf("pid %d %s %v (SCM: %v)", pid, info.AppPath, info.Services, names)
		if !strings.EqualFold(info.App, "svchost.exe") {
			if len(info.Services) != 0 {
				t.Errorf("%s got services %v; only svchost.exe should", info.App, info.Services)
			}
			continue
		}
		found = true
		want := slices.Clone(names)
		slices.Sort(want)
		if !slices.Equal(info.Services, want) {
			t.Errorf("svchost pid %d: Services = %v, want %v", pid, info.Services, want)
		}
	}
	if !found {
		t.Errorf("no running service is hosted by svchost.exe (Wine runs Eventlog there)")
	}
}

func TestSystemPIDs(t *testing.T) {
	r := NewSystemWindowsResolver(nil)
	info, err := r.ByPID(4)
	if err != nil || info.App != "System" {
		t.Errorf("ByPID(4) = %+v, %v", info, err)
	}
}
