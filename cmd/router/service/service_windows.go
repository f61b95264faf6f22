//go:build windows

package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

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

// Uninstall stops the service if it runs, deletes it and its event log source. The files
// in InstallDir stay (router.exe may be the program running this); the guard's WFP
// objects are the caller's to remove.
func Uninstall() error { return uninstall(Name) }

func uninstall(name string) error {
	err := withService(name, func(s *mgr.Service) error {
		stopAndWait(s, 20*time.Second)
		return s.Delete()
	})
	if err != nil {
		return fmt.Errorf("uninstall service: %w", err)
	}
	eventlog.Remove(name)
	return nil
}

// Start starts the installed service.
func Start() error {
	return withService(Name, func(s *mgr.Service) error {
		if err := s.Start(); err != nil {
			return fmt.Errorf("start service: %w", err)
		}
		return nil
	})
}

// Stop stops the service and waits until it has stopped.
func Stop() error {
	return withService(Name, func(s *mgr.Service) error { return stopAndWait(s, 20*time.Second) })
}

// withService runs f on the installed service name; it fails when the service manager
// cannot be asked or name is not installed.
func withService(name string, f func(*mgr.Service) error) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connect to the service manager: %w", err)
	}
	defer m.Disconnect()
	s, err := m.OpenService(name)
	if err != nil {
		return fmt.Errorf("service %q is not installed: %w", name, err)
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
