//go:build windows

package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/eventlog"
	"golang.org/x/sys/windows/svc/mgr"
)

// Name is the service's name; DisplayName what the Services console shows.
const (
	Name        = "router"
	DisplayName = "router: egress firewall for VM-caged coding agents"
	description = "Captures the hypervisor's traffic, sends it through the SOCKS5 upstream, answers DNS, forwards the model port. Stopping it leaves VM traffic blocked."
)

// IsService reports whether the process was started by the service control manager.
func IsService() bool {
	ok, err := svc.IsWindowsService()
	return err == nil && ok
}

// Install creates the service that runs `exe run --config config`, set to start
// automatically and to restart when it fails, and its event log source. It refuses a
// relative config path (the service's working directory is System32).
func Install(exe, config string) error { return install(Name, exe, config) }

// install is Install for the service called name (tests use their own names).
func install(name, exe, config string) error {
	if !filepath.IsAbs(config) {
		return fmt.Errorf("install service: config %q must be an absolute path", config)
	}
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("install service: connect to the service manager: %w", err)
	}
	defer m.Disconnect()
	if s, err := m.OpenService(name); err == nil {
		s.Close()
		return fmt.Errorf("install service: %q is already installed (uninstall it first)", name)
	}
	s, err := m.CreateService(name, exe, mgr.Config{
		DisplayName:  DisplayName,
		Description:  description,
		StartType:    mgr.StartAutomatic,
		Dependencies: []string{"BFE"},
	}, "run", "--config", config)
	if err != nil {
		return fmt.Errorf("install service: %w", err)
	}
	defer s.Close()
	recovery := []mgr.RecoveryAction{
		{Type: mgr.ServiceRestart, Delay: time.Second},
		{Type: mgr.ServiceRestart, Delay: 5 * time.Second},
		{Type: mgr.ServiceRestart, Delay: 30 * time.Second},
	}
	// A service manager without failure actions (Wine's answers ERROR_INVALID_LEVEL) gets
	// a service that is not restarted by itself; every real Windows has them.
	if err := s.SetRecoveryActions(recovery, 24*60*60); err != nil && !errors.Is(err, windows.ERROR_INVALID_LEVEL) {
		s.Delete()
		return fmt.Errorf("install service: recovery actions: %w", err)
	}
	if err := s.SetRecoveryActionsOnNonCrashFailures(true); err != nil && !errors.Is(err, windows.ERROR_INVALID_LEVEL) {
		s.Delete()
		return fmt.Errorf("install service: recovery actions: %w", err)
	}
	if err := eventlog.InstallAsEventCreate(name, eventlog.Error|eventlog.Warning|eventlog.Info); err != nil && !strings.Contains(err.Error(), "exists") {
		s.Delete()
		return fmt.Errorf("install service: event log source: %w", err)
	}
	return nil
}

// Uninstall stops the service if it runs, deletes it and its event log source.
func Uninstall() error { return uninstall(Name) }

// uninstall is Uninstall for the service called name.
func uninstall(name string) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("uninstall service: connect to the service manager: %w", err)
	}
	defer m.Disconnect()
	s, err := m.OpenService(name)
	if err != nil {
		return fmt.Errorf("uninstall service: %q is not installed", name)
	}
	defer s.Close()
	stopAndWait(s, 20*time.Second)
	if err := s.Delete(); err != nil {
		return fmt.Errorf("uninstall service: %w", err)
	}
	eventlog.Remove(name)
	return nil
}

// Start starts the installed service.
func Start() error {
	return withService(func(s *mgr.Service) error {
		if err := s.Start(); err != nil {
			return fmt.Errorf("start service: %w", err)
		}
		return nil
	})
}

// Stop stops the service and waits until it has stopped.
func Stop() error {
	return withService(func(s *mgr.Service) error { return stopAndWait(s, 20*time.Second) })
}

func withService(f func(*mgr.Service) error) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connect to the service manager: %w", err)
	}
	defer m.Disconnect()
	s, err := m.OpenService(Name)
	if err != nil {
		return fmt.Errorf("service %q is not installed: %w", Name, err)
	}
	defer s.Close()
	return f(s)
}

func stopAndWait(s *mgr.Service, timeout time.Duration) error {
	st, err := s.Query()
	if err != nil || st.State == svc.Stopped {
		return nil
	}
	if _, err := s.Control(svc.Stop); err != nil {
		return fmt.Errorf("stop service: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		st, err := s.Query()
		if err != nil {
			return fmt.Errorf("stop service: %w", err)
		}
		if st.State == svc.Stopped {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("stop service: it did not stop in time")
}

// RunFunc is the daemon: it runs until ctx is done and reloads on each value of reload.
type RunFunc func(ctx context.Context, reload <-chan struct{}) error

// Run runs fn as the service until the service control manager stops it.
func Run(fn RunFunc) error {
	return svc.Run(Name, &handler{run: fn})
}

// handler is the service control handler: Stop and Shutdown cancel the daemon's context,
// ParamChange (`sc control router paramchange`) reloads the config.
type handler struct {
	run RunFunc
}

// Execute implements svc.Handler.
func (h *handler) Execute(args []string, requests <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	const accepts = svc.AcceptStop | svc.AcceptShutdown | svc.AcceptParamChange
	status <- svc.Status{State: svc.StartPending}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reload := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, reload) }()
	status <- svc.Status{State: svc.Running, Accepts: accepts}
	for {
		select {
		case err := <-done:
			// The daemon ended by itself: report failure so the recovery actions restart it.
			status <- svc.Status{State: svc.StopPending}
			if err != nil {
				return true, 1
			}
			return false, 0
		case r := <-requests:
			switch r.Cmd {
			case svc.Interrogate:
				status <- r.CurrentStatus
			case svc.Stop, svc.Shutdown:
				status <- svc.Status{State: svc.StopPending}
				cancel()
				if err := <-done; err != nil {
					return true, 1
				}
				return false, 0
			case svc.ParamChange:
				select {
				case reload <- struct{}{}:
				default:
				}
			}
		}
	}
}

// EventLogHandler is a slog.Handler that writes text records to the service's event log.
func EventLogHandler(level slog.Leveler) (slog.Handler, func(), error) {
	el, err := eventlog.Open(Name)
	if err != nil {
		return nil, nil, fmt.Errorf("open event log: %w", err)
	}
	h := &eventHandler{el: el, level: level}
	h.text = slog.NewTextHandler(&h.buf, &slog.HandlerOptions{Level: level})
	return h, func() { el.Close() }, nil
}

type eventHandler struct {
	el    *eventlog.Log
	level slog.Leveler
	buf   lineBuffer
	text  slog.Handler
}

func (h *eventHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.text.Enabled(ctx, l) }

func (h *eventHandler) Handle(ctx context.Context, r slog.Record) error {
	msg, err := h.buf.format(func() error { return h.text.Handle(ctx, r) })
	if err != nil {
		return err
	}
	switch {
	case r.Level >= slog.LevelError:
		return h.el.Error(3, msg)
	case r.Level >= slog.LevelWarn:
		return h.el.Warning(2, msg)
	}
	return h.el.Info(1, msg)
}

func (h *eventHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := &eventHandler{el: h.el, level: h.level}
	n.text = slog.NewTextHandler(&n.buf, &slog.HandlerOptions{Level: h.level}).WithAttrs(as)
	return n
}

func (h *eventHandler) WithGroup(g string) slog.Handler {
	n := &eventHandler{el: h.el, level: h.level}
	n.text = slog.NewTextHandler(&n.buf, &slog.HandlerOptions{Level: h.level}).WithGroup(g)
	return n
}
