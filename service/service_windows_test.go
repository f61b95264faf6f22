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
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"
)

// TestExecute drives the control handler with the channels the service manager would use.
func TestExecute(t *testing.T) {
	reloads := make(chan struct{}, 4)
	ran := make(chan struct{})
	h := &handler{run: func(ctx context.Context, reload <-chan struct{}) error {
		close(ran)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-reload:
				reloads <- struct{}{}
			}
		}
	}}
	requests := make(chan svc.ChangeRequest)
	status := make(chan svc.Status, 16)
	type result struct {
		special bool
		code    uint32
	}
	done := make(chan result, 1)
	go func() {
		s, c := h.Execute(nil, requests, status)
		done <- result{s, c}
	}()
	<-ran
	if st := <-status; st.State != svc.StartPending {
		t.Fatalf("first status %v", st.State)
	}
	if st := <-status; st.State != svc.Running || st.Accepts&svc.AcceptStop == 0 || st.Accepts&svc.AcceptParamChange == 0 {
		t.Fatalf("second status %+v", st)
	}
	requests <- svc.ChangeRequest{Cmd: svc.Interrogate, CurrentStatus: svc.Status{State: svc.Running}}
	if st := <-status; st.State != svc.Running {
		t.Fatalf("interrogate answered %v", st.State)
	}
	requests <- svc.ChangeRequest{Cmd: svc.ParamChange}
	select {
	case <-reloads:
	case <-time.After(5 * time.Second):
		t.Fatal("ParamChange did not reload")
	}
	requests <- svc.ChangeRequest{Cmd: svc.Stop}
	if st := <-status; st.State != svc.StopPending {
		t.Fatalf("stop status %v", st.State)
	}
	if r := <-done; r.special || r.code != 0 {
		t.Fatalf("exit %+v", r)
	}
}

// TestExecuteDaemonFails: a daemon that ends with an error makes the service fail, so the
// recovery actions restart it.
func TestExecuteDaemonFails(t *testing.T) {
	h := &handler{run: func(ctx context.Context, reload <-chan struct{}) error { return errors.New("capture failed") }}
	status := make(chan svc.Status, 16)
	special, code := h.Execute(nil, make(chan svc.ChangeRequest), status)
	if !special || code == 0 {
		t.Fatalf("got %v %d, want a service-specific failure", special, code)
	}
}

// TestInstallUninstall creates and deletes a service in the real service manager (under
// Wine, the prefix's). Starting it is not tested: Wine's manager times out starting Go
// services.
func TestInstallUninstall(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	name := testService(t)
	if err := install(name, exe, "relative.toml"); err == nil {
		t.Fatal("a relative config path was accepted")
	}
	if err := install(name, exe, `C:\router\router.toml`); err != nil {
		t.Fatal(err)
	}
	if err := install(name, exe, `C:\router\router.toml`); err == nil {
		t.Error("a second install did not fail")
	}
	m, err := mgr.Connect()
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.OpenService(name)
	if err != nil {
		m.Disconnect()
		t.Fatal(err)
	}
	// QueryServiceConfig (level 1): Wine's manager has no QueryServiceConfig2, which
	// mgr.Service.Config also calls.
	var need uint32
	windows.QueryServiceConfig(s.Handle, nil, 0, &need)
	buf := make([]byte, need)
	qc := (*windows.QUERY_SERVICE_CONFIG)(unsafe.Pointer(&buf[0]))
	err = windows.QueryServiceConfig(s.Handle, qc, need, &need)
	s.Close()
	m.Disconnect()
	if err != nil {
		t.Fatal(err)
	}
	if qc.StartType != mgr.StartAutomatic || windows.UTF16PtrToString(qc.DisplayName) != DisplayName {
		t.Errorf("start type %d, display name %q", qc.StartType, windows.UTF16PtrToString(qc.DisplayName))
	}
	if bin, want := windows.UTF16PtrToString(qc.BinaryPathName), `run --config C:\router\router.toml`; !strings.Contains(bin, want) {
		t.Errorf("binary path %q lacks %q", bin, want)
	}
	if err := uninstall(name); err != nil {
		t.Fatal(err)
	}
	if err := uninstall(name); err == nil {
		t.Error("uninstalling twice did not fail")
	}
}

// testServicePrefix starts the name of every service these tests install; the PID of the
// test process follows, so that runs sharing a service manager do not collide and the
// leftover of a run that died is recognised.
const testServicePrefix = "router-test-"

// testService returns a service name of this process for t, after removing the leftovers of
// dead runs. t's cleanup uninstalls the service if the test left it installed, pass or fail.
func testService(t *testing.T) string {
	t.Helper()
	removeStaleTestServices(t)
	name := fmt.Sprintf("%s%d", testServicePrefix, os.Getpid())
	t.Cleanup(func() {
		if !serviceExists(t, name) {
			return
		}
		if err := uninstall(name); err != nil {
			t.Errorf("clean up service %s: %v", name, err)
		}
	})
	return name
}

// removeStaleTestServices uninstalls the test services whose process is gone: its PID names
// no process, or one whose image is not this test binary. A test service of this process
// (an earlier test that could not clean up) goes too.
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
		pid, err := strconv.ParseUint(rest, 10, 32)
		if err != nil {
			continue // not of our naming
		}
		if int(pid) != os.Getpid() && runsImage(uint32(pid), filepath.Base(self)) {
			continue // a live run's
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

// serviceExists reports whether the service manager knows name.
func serviceExists(t *testing.T, name string) bool {
	t.Helper()
	m, err := mgr.Connect()
	if err != nil {
		t.Errorf("connect to the service manager: %v", err)
		return false
	}
	defer m.Disconnect()
	s, err := m.OpenService(name)
	if err != nil {
		return false
	}
	s.Close()
	return true
}

// TestStaleTestServiceRemoved: the service of a test run that died (its PID names no
// process) is removed by the next run.
func TestStaleTestServiceRemoved(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d", testServicePrefix, 0x7ffffff0) // no process has this PID
	if err := install(stale, exe, `C:\router\router.toml`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if serviceExists(t, stale) {
			uninstall(stale)
		}
	})
	removeStaleTestServices(t)
	if serviceExists(t, stale) {
		t.Errorf("stale service %s is still installed", stale)
	}
}
