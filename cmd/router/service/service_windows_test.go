//go:build windows

package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"

	"github.com/agentcage/router/internal/winetest"
)

// next waits for the next status the handler reports.
func next(t *testing.T, status <-chan svc.Status) svc.Status {
	t.Helper()
	select {
	case st := <-status:
		return st
	case <-time.After(10 * time.Second):
		t.Fatal("no status from the handler")
	}
	return svc.Status{}
}

type result struct {
	special bool
	code    uint32
}

func execute(h *handler, requests chan svc.ChangeRequest, status chan svc.Status) <-chan result {
	done := make(chan result, 1)
	go func() {
		s, c := h.Execute(nil, requests, status)
		done <- result{s, c}
	}()
	return done
}

// TestExecute drives the control handler with the channels the service manager would use:
// "start pending" until the daemon says the capture is armed, then "running".
func TestExecute(t *testing.T) {
	reloads := make(chan struct{}, 4)
	arm := make(chan struct{})
	h := newHandler(RunOptions{}, func(ctx context.Context, reload <-chan struct{}, armed func()) error {
		<-arm
		armed()
		armed() // only the first counts
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-reload:
				reloads <- struct{}{}
			}
		}
	})
	requests := make(chan svc.ChangeRequest)
	status := make(chan svc.Status, 16)
	done := execute(h, requests, status)
	if st := next(t, status); st.State != svc.StartPending || st.Accepts != 0 || st.WaitHint == 0 {
		t.Fatalf("first status %+v, want start pending accepting nothing, with a wait hint", st)
	}
	requests <- svc.ChangeRequest{Cmd: svc.Interrogate}
	if st := next(t, status); st.State != svc.StartPending {
		t.Fatalf("before arming, interrogate answered %v", st.State)
	}
	close(arm)
	if st := next(t, status); st.State != svc.Running || st.Accepts&svc.AcceptStop == 0 || st.Accepts&svc.AcceptParamChange == 0 {
		t.Fatalf("after arming %+v", st)
	}
	requests <- svc.ChangeRequest{Cmd: svc.Interrogate}
	if st := next(t, status); st.State != svc.Running {
		t.Fatalf("interrogate answered %v", st.State)
	}
	requests <- svc.ChangeRequest{Cmd: svc.ParamChange}
	select {
	case <-reloads:
	case <-time.After(5 * time.Second):
		t.Fatal("ParamChange did not reload")
	}
	requests <- svc.ChangeRequest{Cmd: svc.Stop}
	if st := next(t, status); st.State != svc.StopPending {
		t.Fatalf("stop status %v", st.State)
	}
	if r := <-done; r.special || r.code != 0 {
		t.Fatalf("exit %+v", r)
	}
}

// TestExecuteStopCheckpoints: a stop that takes a while (the permits' wait) renews "stop
// pending" with rising checkpoints and a wait hint until the daemon has ended.
func TestExecuteStopCheckpoints(t *testing.T) {
	release := make(chan struct{})
	h := newHandler(RunOptions{CheckpointEvery: 10 * time.Millisecond}, func(ctx context.Context, _ <-chan struct{}, armed func()) error {
		armed()
		<-ctx.Done()
		<-release
		return nil
	})
	requests := make(chan svc.ChangeRequest)
	status := make(chan svc.Status, 64)
	done := execute(h, requests, status)
	for st := next(t, status); st.State != svc.Running; st = next(t, status) {
	}
	requests <- svc.ChangeRequest{Cmd: svc.Stop}
	last := uint32(0)
	for i := 0; i < 3; i++ {
		st := next(t, status)
		if st.State != svc.StopPending || st.CheckPoint <= last || st.WaitHint == 0 {
			t.Fatalf("stop status %d: %+v, want stop pending with a rising checkpoint and a wait hint", i, st)
		}
		last = st.CheckPoint
	}
	close(release)
	if r := <-done; r.special || r.code != 0 {
		t.Fatalf("exit %+v", r)
	}
}

// TestExecuteFailures: a daemon that fails, or ends by itself, or never arms, makes the
// service fail, so the recovery actions restart it; it is never reported running when it
// failed before arming.
func TestExecuteFailures(t *testing.T) {
	for name, d := range map[string]Daemon{
		"error before arming": func(ctx context.Context, _ <-chan struct{}, _ func()) error { return errors.New("driver refused") },
		"error after arming": func(ctx context.Context, _ <-chan struct{}, armed func()) error {
			armed()
			return errors.New("capture read failed")
		},
		"nil by itself": func(ctx context.Context, _ <-chan struct{}, armed func()) error { armed(); return nil },
		"never arms": func(ctx context.Context, _ <-chan struct{}, _ func()) error {
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), errStartTimeout) {
				return fmt.Errorf("cancelled with %v", context.Cause(ctx))
			}
			return nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			status := make(chan svc.Status, 16)
			h := newHandler(RunOptions{StartTimeout: 200 * time.Millisecond}, d)
			r := <-execute(h, make(chan svc.ChangeRequest), status)
			if !r.special || r.code == 0 {
				t.Fatalf("got %+v, want a service-specific failure", r)
			}
			close(status)
			var states []string
			for st := range status {
				states = append(states, fmt.Sprint(st.State))
			}
			if name == "error before arming" || name == "never arms" {
				for _, s := range states {
					if s == fmt.Sprint(svc.Running) {
						t.Errorf("reported running: %v", states)
					}
				}
			}
			if states[len(states)-1] != fmt.Sprint(svc.StopPending) {
				t.Errorf("last status %v, want stop pending", states)
			}
		})
	}
}

var serial atomic.Int32

// testServicePrefix starts the names of the services tests install: the test process's PID
// and a serial number follow.
const testServicePrefix = "router-test-"

// uniqueName is a service name no other test (or test process) uses.
func uniqueName() string {
	return fmt.Sprintf("%s%d-%d", testServicePrefix, os.Getpid(), serial.Add(1))
}

// removeStaleTestServices uninstalls the test services of runs that died before their
// clean-up (a killed test binary, a reused Wine prefix): those whose PID names no process,
// or one that is not a test binary of this package.
func removeStaleTestServices(t *testing.T) {
	t.Helper()
	m, err := mgr.Connect()
	if err != nil {
		t.Fatalf("connect to the service manager: %v", err)
	}
	names, err := m.ListServices()
	m.Disconnect()
	if err != nil {
		t.Fatalf("list services: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, testServicePrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.ParseUint(pidText, 10, 32)
		if err != nil || int(pid) == os.Getpid() || runsImage(uint32(pid), filepath.Base(self)) {
			continue // not of our naming, ours, or a live run's
		}
		t.Logf("removing the stale test service %s", name)
		if err := uninstall(name); err != nil {
			t.Errorf("remove stale test service %s: %v", name, err)
		}
	}
}

// runsImage reports whether process pid exists and runs an executable whose file name is
// image (case-insensitively).
func runsImage(pid uint32, image string) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, pid)
	if err != nil {
		return false
	}
	defer windows.CloseHandle(h)
	buf := make([]uint16, windows.MAX_LONG_PATH)
	size := uint32(len(buf))
	if err := windows.QueryFullProcessImageName(h, 0, &buf[0], &size); err != nil {
		return false
	}
	path := windows.UTF16ToString(buf[:size])
	return strings.EqualFold(path[strings.LastIndexAny(path, `\/`)+1:], image)
}

// testInstall installs a service with a unique name into a temporary directory and
// removes it when the test ends, whatever happens. Under Wine, which keeps no ACL on
// files (it reports the current user's full access whatever was set), the directory
// check is replaced after asserting that it refuses.
func testInstall(t *testing.T, config string) (installOptions, error) {
	t.Helper()
	removeStaleTestServices(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o := installOptions{name: uniqueName(), exe: exe, config: config, dir: filepath.Join(winetest.TempDir(t), "router"),
		winDivert: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "WinDivert.dll"), []byte("stand-in"), 0o644)
		},
		checkDir: checkAdminOnly}
	t.Cleanup(func() { uninstall(o.name) })
	t.Cleanup(func() {
		for _, f := range []string{"router.exe", "WinDivert.dll"} {
			os.Remove(filepath.Join(o.dir, f))
		}
		os.Remove(o.dir)
	})
	if winetest.UnderWine() && filepath.IsAbs(config) {
		if err := install(o); err == nil || !strings.Contains(err.Error(), "may write there") {
			t.Fatalf("under Wine the install directory must count as writable by the user: %v", err)
		}
		o.checkDir = func(string) error { return nil }
	}
	return o, install(o)
}

// TestInstallUninstall creates and deletes a service in the real service manager (under
// Wine, the prefix's): the binary is the copy in the install directory, which only
// administrators may write. Starting it is not tested: Wine's manager times out starting
// Go services.
func TestInstallUninstall(t *testing.T) {
	if dir, err := InstallDir(); err != nil || !filepath.IsAbs(dir) || !strings.HasSuffix(dir, `\router`) {
		t.Errorf("install dir %q, %v", dir, err)
	}
	if _, err := testInstall(t, "relative.toml"); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Fatalf("a relative config path: %v", err)
	}
	o, err := testInstall(t, `C:\router\router.toml`)
	if err != nil {
		t.Fatal(err)
	}
	if err := install(o); err == nil || !strings.Contains(err.Error(), "already installed") {
		t.Errorf("a second install: %v", err)
	}
	for _, f := range []string{"router.exe", "WinDivert.dll"} {
		if _, err := os.Stat(filepath.Join(o.dir, f)); err != nil {
			t.Errorf("%s not installed: %v", f, err)
		}
	}
	if err := o.checkDir(o.dir); err != nil {
		t.Errorf("install directory: %v", err)
	}
	m, err := mgr.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Disconnect()
	s, err := m.OpenService(o.name)
	if err != nil {
		t.Fatal(err)
	}
	// QueryServiceConfig (level 1): Wine's manager has no QueryServiceConfig2, which
	// mgr.Service.Config also calls.
	var need uint32
	windows.QueryServiceConfig(s.Handle, nil, 0, &need)
	buf := make([]byte, need)
	qc := (*windows.QUERY_SERVICE_CONFIG)(unsafe.Pointer(&buf[0]))
	if err := windows.QueryServiceConfig(s.Handle, qc, need, &need); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if qc.StartType != mgr.StartAutomatic || windows.UTF16PtrToString(qc.DisplayName) != DisplayName {
		t.Errorf("start type %d, display name %q", qc.StartType, windows.UTF16PtrToString(qc.DisplayName))
	}
	bin := windows.UTF16PtrToString(qc.BinaryPathName)
	// Quoted when it has spaces, as %ProgramFiles% has (no unquoted service path).
	if want := syscall.EscapeArg(filepath.Join(o.dir, "router.exe")) + ` run --config C:\router\router.toml`; bin != want {
		t.Errorf("binary path %q, want %q", bin, want)
	}
	if err := uninstall(o.name); err != nil {
		t.Fatal(err)
	}
	if err := uninstall(o.name); err == nil {
		t.Error("uninstalling twice did not fail")
	}
}

// TestCheckAdminOnly: a directory users may write is refused.
func TestCheckAdminOnly(t *testing.T) {
	dir := winetest.TempDir(t)
	// Administrators: full control; Users: modify.
	setDACL(t, dir, "D:P(A;OICI;FA;;;BA)(A;OICI;0x1301bf;;;BU)")
	want := "S-1-5-32-545 may write there" // Users
	if winetest.UnderWine() {
		want = "may write there" // Wine reports the current user instead
	}
	if err := checkAdminOnly(dir); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a directory Users may modify: %v, want %q", err, want)
	}
}

func TestLockInstance(t *testing.T) {
	name := uniqueName()
	release, err := LockInstance(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	if _, err := LockInstance(name); !errors.Is(err, ErrAlreadyRunning) {
		t.Errorf("second lock: %v", err)
	}
	release()
	release()
	again, err := LockInstance(name)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again()
}

// setDACL gives path the access list of sddl (protected: nothing inherited).
func setDACL(t *testing.T, path, sddl string) {
	t.Helper()
	sd, err := windows.SecurityDescriptorFromString(sddl)
	if err != nil {
		t.Fatal(err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		t.Fatal(err)
	}
	if err := windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil); err != nil {
		t.Fatal(err)
	}
}

// TestCheckTrusted: a config that users may change (itself, or through its folder, as in
// a C:\ProgramData subfolder) is refused with the fix; one only administrators may write is
// accepted.
func TestCheckTrusted(t *testing.T) {
	dir := winetest.TempDir(t)
	cfg := filepath.Join(dir, "router.toml")
	if err := os.WriteFile(cfg, []byte("# config\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const protected = "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)"
	// Wine reads back an access list that grants the current user full control whatever
	// was set (see TestCheckAdminOnly): there every case is refused, so only the refusals
	// and their message are checked; the accepted case and which object is named need
	// Windows (and TestWriters checks the decision on the lists Windows gives).
	wine := winetest.UnderWine()
	setDACL(t, dir, protected)
	setDACL(t, cfg, protected)
	if err := CheckTrusted(cfg); err != nil && !wine {
		t.Errorf("a protected config: %v", err)
	}
	setDACL(t, dir, "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)(A;CI;0x2;;;BU)") // ProgramData: users add files
	err := CheckTrusted(cfg)
	if err == nil || !strings.Contains(err.Error(), "icacls") || (!wine && !strings.Contains(err.Error(), "may change "+dir)) {
		t.Errorf("a folder users may add files to: %v, want refused with the fix", err)
	}
	setDACL(t, dir, protected)
	setDACL(t, cfg, "D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x1301bf;;;BU)") // users may modify the file
	if err := CheckTrusted(cfg); err == nil || !strings.Contains(err.Error(), "may change "+cfg) {
		t.Errorf("a file users may modify: %v, want refused", err)
	}
}
