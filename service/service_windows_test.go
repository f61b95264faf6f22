//go:build windows

package service

import (
	"context"
	"errors"
	"os"
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

// TestInstallUninstall creates and deletes the service in the real service manager (under
// Wine, the prefix's). Starting it is not tested: Wine's manager times out starting Go
// services.
func TestInstallUninstall(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := Install(exe, "relative.toml"); err == nil {
		t.Fatal("a relative config path was accepted")
	}
	Uninstall() // a leftover from an interrupted run
	if err := Install(exe, `C:\router\router.toml`); err != nil {
		t.Fatal(err)
	}
	if err := Install(exe, `C:\router\router.toml`); err == nil {
		t.Error("a second install did not fail")
	}
	m, err := mgr.Connect()
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.OpenService(Name)
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
	m.Disconnect()
	if qc.StartType != mgr.StartAutomatic || windows.UTF16PtrToString(qc.DisplayName) != DisplayName {
		t.Errorf("start type %d, display name %q", qc.StartType, windows.UTF16PtrToString(qc.DisplayName))
	}
	if bin, want := windows.UTF16PtrToString(qc.BinaryPathName), `run --config C:\router\router.toml`; !strings.Contains(bin, want) {
		t.Errorf("binary path %q lacks %q", bin, want)
	}
	if err := Uninstall(); err != nil {
		t.Fatal(err)
	}
	if err := Uninstall(); err == nil {
		t.Error("uninstalling twice did not fail")
	}
}
