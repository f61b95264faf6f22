package proc

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentcage/router/rules"
)

// This file holds the platform-neutral part of the Windows attribution: the cache and the
// svchost.exe -> services logic of WindowsResolver, over two small interfaces that the OS
// implements in proc_windows.go and that tests fake on any OS.

// ProcessQuerier answers per-PID questions about running processes.
type ProcessQuerier interface {
	// Created returns the creation time of process pid. With the PID it identifies one
	// process: Windows reuses PIDs. It returns an error wrapping ErrNoProcess when no
	// process has that PID.
	Created(pid uint32) (time.Time, error)
	// ImagePath returns the full path of the executable of process pid, e.g.
	// `C:\Windows\System32\svchost.exe`.
	ImagePath(pid uint32) (string, error)
}

// ServiceEnumerator lists the running Win32 services by the PID of the process hosting them
// (EnumServicesStatusEx with SC_ENUM_PROCESS_INFO, SERVICE_WIN32, SERVICE_ACTIVE).
type ServiceEnumerator interface {
	ServicesByPID() (map[uint32][]string, error)
}

// ErrNoProcess means that no process has the PID asked about.
var ErrNoProcess = errors.New("proc: no such process")

// Process is what WindowsResolver knows about one process.
type Process struct {
	Owner   rules.Owner
	Created time.Time // creation time, from the OS
}

// WindowsOptions tunes a WindowsResolver; the zero value gives the defaults.
type WindowsOptions struct {
	Log *slog.Logger     // nil: discard
	Now func() time.Time // nil: time.Now
	// ServicesMaxAge is how long a service snapshot is trusted for svchost processes that
	// existed when it was taken (services start and stop inside shared svchosts).
	// Default 30 s.
	ServicesMaxAge time.Duration
	// ServicesMinInterval is the least time between two enumerations of the Service
	// Control Manager, however many unknown svchost PIDs show up. Default 1 s.
	ServicesMinInterval time.Duration
	// MaxEntries bounds the PID cache. Default 4096.
	MaxEntries int
}

// WindowsResolver maps a PID to its image name and path, and for svchost.exe to the names
// of the services it hosts. It is safe for concurrent use.
//
// Caching: an entry is keyed by PID and checked against the process creation time on every
// lookup (one OpenProcess + GetProcessTimes), so a reused PID is noticed and looked up
// anew. The service snapshot is refreshed when an svchost.exe started after it was taken,
// when an svchost PID is missing from it, or when it is older than ServicesMaxAge; never
// more often than ServicesMinInterval.
//
// The PID-reuse race that remains: WinDivert's SOCKET event carries the PID at connect
// time; if that process exits and Windows hands its PID to a new process before ByPID
// runs, the new process is reported. Lookup returns the creation time so the caller can
// drop an answer for a process created after the event (Address.Timestamp, a
// QueryPerformanceCounter value, converted to wall time).
//
// mu guards entries and snap; scmMu serialises enumerations of the service manager.
type WindowsResolver struct {
	procs ProcessQuerier
	svcs  ServiceEnumerator
	log   *slog.Logger
	now   func() time.Time
	opt   WindowsOptions

	mu      sync.Mutex
	entries map[uint32]Process
	snap    serviceSnapshot

	scmMu sync.Mutex
}

type serviceSnapshot struct {
	taken time.Time
	byPID map[uint32][]string // nil before the first enumeration
}

// NewWindowsResolver returns a resolver over procs and svcs.
func NewWindowsResolver(procs ProcessQuerier, svcs ServiceEnumerator, opt WindowsOptions) *WindowsResolver {
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.ServicesMaxAge <= 0 {
		opt.ServicesMaxAge = 30 * time.Second
	}
	if opt.ServicesMinInterval <= 0 {
		opt.ServicesMinInterval = time.Second
	}
	if opt.MaxEntries <= 0 {
		opt.MaxEntries = 4096
	}
	return &WindowsResolver{procs: procs, svcs: svcs, log: opt.Log, now: opt.Now, opt: opt,
		entries: map[uint32]Process{}}
}

// Well-known PIDs that cannot be opened.
const (
	pidIdle   = 0
	pidSystem = 4
)

// ByPID returns the owner that is process pid. PID 4 is "System" (kernel sockets such as SMB) and
// PID 0 "System Idle Process", both without a path. The Services slice is shared with the
// cache: do not modify it.
func (r *WindowsResolver) ByPID(pid uint32) (rules.Owner, error) {
	p, err := r.Lookup(pid)
	return p.Owner, err
}

// ByPIDAt is ByPID for a PID seen at a moment (a socket event's time): a process created
// after that moment is not the one that was seen (Windows reused the PID), and the owner is
// then unknown rather than wrong. A zero at skips the check.
func (r *WindowsResolver) ByPIDAt(pid uint32, at time.Time) (rules.Owner, error) {
	p, err := r.Lookup(pid)
	if err != nil {
		return rules.Owner{}, err
	}
	if !at.IsZero() && !p.Created.IsZero() && p.Created.After(at) {
		return rules.Owner{}, fmt.Errorf("proc: pid %d: reused by %s, created %v after the event", pid, p.Owner.App, p.Created.Sub(at).Round(time.Millisecond))
	}
	return p.Owner, nil
}

// Lookup is ByPID with the creation time of the process.
func (r *WindowsResolver) Lookup(pid uint32) (Process, error) {
	switch pid {
	case pidIdle:
		return Process{Owner: rules.Owner{PID: pidIdle, App: "System Idle Process"}}, nil
	case pidSystem:
		return Process{Owner: rules.Owner{PID: pidSystem, App: "System"}}, nil
	}
	created, err := r.procs.Created(pid)
	if err != nil {
		r.forget(pid)
		return Process{}, fmt.Errorf("proc: pid %d: %w", pid, err)
	}
	r.mu.Lock()
	e, ok := r.entries[pid]
	r.mu.Unlock()
	if !ok || !e.Created.Equal(created) {
		path, err := r.procs.ImagePath(pid)
		if err != nil {
			r.forget(pid)
			return Process{}, fmt.Errorf("proc: pid %d: image path: %w", pid, err)
		}
		e = Process{Owner: rules.Owner{PID: int(pid), App: rules.BaseName(path), AppPath: path}, Created: created}
		if ok {
			r.log.Debug("pid reused", "pid", pid, "image", path)
		}
	}
	if isSvchost(e.Owner.App) {
		e.Owner.Services = r.servicesOf(pid, created)
	}
	r.store(pid, e)
	return e, nil
}

func (r *WindowsResolver) forget(pid uint32) {
	r.mu.Lock()
	delete(r.entries, pid)
	r.mu.Unlock()
}

func (r *WindowsResolver) store(pid uint32, e Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.entries[pid]; !ok && len(r.entries) >= r.opt.MaxEntries {
		// Drop a quarter of the entries, arbitrary ones: they are re-read on demand.
		n := len(r.entries) / 4
		for k := range r.entries {
			if n <= 0 {
				break
			}
			delete(r.entries, k)
			n--
		}
	}
	r.entries[pid] = e
}

// servicesOf returns the services hosted by pid (created at created), refreshing the
// snapshot as the type's doc says. On an enumeration error it logs and answers from the
// previous snapshot.
func (r *WindowsResolver) servicesOf(pid uint32, created time.Time) []string {
	fresh := func(s serviceSnapshot, now time.Time) bool {
		if s.byPID == nil || s.taken.Before(created) || now.Sub(s.taken) >= r.opt.ServicesMaxAge {
			return false
		}
		_, ok := s.byPID[pid]
		return ok
	}
	r.mu.Lock()
	s := r.snap
	r.mu.Unlock()
	if fresh(s, r.now()) {
		return s.byPID[pid]
	}
	r.scmMu.Lock()
	defer r.scmMu.Unlock()
	r.mu.Lock()
	s = r.snap
	r.mu.Unlock()
	now := r.now()
	if fresh(s, now) || (s.byPID != nil && now.Sub(s.taken) < r.opt.ServicesMinInterval) {
		return s.byPID[pid]
	}
	m, err := r.svcs.ServicesByPID()
	if err != nil {
		r.log.Warn("enumerate services", "err", err)
		return s.byPID[pid]
	}
	for k := range m {
		slices.Sort(m[k])
	}
	r.mu.Lock()
	r.snap = serviceSnapshot{taken: now, byPID: m}
	r.mu.Unlock()
	return m[pid]
}

func isSvchost(name string) bool { return strings.EqualFold(name, "svchost.exe") }
