// Package wfptest is an in-memory filtering engine that behaves like Windows' Base
// Filtering Engine where the router's guard depends on it, so the guard is tested on any
// OS: providers, sublayers and filters; sessions, static and dynamic; transactions with
// rollback and the machine-wide transaction lock; persistent, boot-time and session
// lifetimes; a process dying; a reboot; error injection; and Classify, which applies WFP's
// arbitration to a flow.
//
// The model (what Windows documents, and where it does not, what we assume; the
// assumptions are items of the Windows checklist):
//   - Processes. Engine.Process(name) is a process: it implements wfp.Engine and its
//     sessions end together when Exit is called (a crash, taskkill /F). Engine itself
//     implements wfp.Engine for a default process.
//   - Sessions. Objects added in a dynamic session are deleted when the session is closed
//     or its process ends; a dynamic session cannot add persistent or boot-time objects
//     (FWP_E_DYNAMIC_SESSION_IN_PROGRESS). Objects a static session adds without a
//     lifetime flag stay until the engine stops (Reboot).
//   - Lifetimes. A persistent or boot-time object may only name persistent providers and
//     sublayers (FWP_E_LIFETIME_MISMATCH). A dynamic filter may live in a persistent
//     sublayer (assumed). Deleting a sublayer or provider that filters still name fails
//     with FWP_E_IN_USE. When a dynamic session's sublayer goes, its filters go with it.
//   - Transactions. One at a time, machine-wide: while a session holds one, any other
//     session's change fails at once with FWP_E_TIMEOUT (Windows waits for the lock, up to
//     the session's timeout). Changes inside a transaction are seen by that session only
//     until Commit; Abort, a failed Commit, Close and the process's end roll them back.
//   - Teardown is not atomic. When a process dies (Crash), Windows closes its handles at
//     once but the BFE deletes its dynamic sessions' objects later, when the RPC context
//     runs down, and only once it gets the machine-wide transaction lock: until Rundown,
//     the dead process's filters are still enforced. Closing a dynamic session while
//     another session holds a transaction likewise leaves its objects in force until that
//     transaction ends (assumed: the deletion waits for the lock like any change). Exit
//     is a crash whose rundown happens at once. Every session end and every deletion of
//     its objects is recorded, in order (Events).
//   - Reboot. Every session ends; non-persistent objects are gone; the engine is in its
//     boot phase, where Open fails (BFE is not running) and only boot-time filters are
//     enforced. Boot() is the BFE finishing its start: from then on persistent and session
//     filters are enforced and boot-time filters are not (Windows removes them from the
//     running engine once BFE is up). Boot-time filters stay listed and deletable by key at
//     any time (assumed: Windows lists them with FWP_FILTER_ENUM_FLAG_INCLUDE_BOOTTIME).
//   - Arbitration (Classify). Sublayers are evaluated from the highest weight down (equal
//     weights: by key). In each, the matching filter of highest weight (equal: by key)
//     gives the sublayer's action. A block is final unless a hard permit came before it;
//     a permit stands unless a later block overrides it. Nothing matching: permit.
//   - The loopback flag is set when the remote address is a loopback address or one of
//     the engine's host addresses (SetHostAddrs): both ends are this machine.
//   - The accept layers (ALE_AUTH_RECV_ACCEPT) classify a connection a process takes, a
//     TCP accept or the first datagram from a new remote to a UDP socket: Flow.App is the
//     listening process, Remote the client, the loopback flag set when the client is this
//     machine (at either end's address). Flow.Interface is the local interface the
//     connection arrived on (IP_LOCAL_INTERFACE, an adapter's LUID). A condition on the
//     flags matches "all set" or, FlagsClear, "none set"; like any two conditions on one
//     field, two on the flags are OR-ed. Windows Firewall's stand-in (WindowsFirewall)
//     blocks inbound connections no rule allows but never loopback ones.
//
// All methods are safe for concurrent use. The engine's mutex guards every field; the
// observer set with Observe is called after each committed change, without the mutex held.
package wfptest

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/agentcage/router/windivert/wfp"
)

// Op names an engine call, for fault injection.
type Op struct {
	Name    string  // "open", "begin", "commit", "abort", "add-provider", "delete-provider", "add-sublayer", "delete-sublayer", "add-filter", "delete-filter", "filters", "app-id"
	Process string  // the process making the call
	Key     wfp.Key // the object's key, when the call has one
}

// Engine is the in-memory filtering engine. Its zero value is not usable; call New.
type Engine struct {
	mu        sync.Mutex
	st        *state // the committed state
	phase     phase
	nextID    int
	sessions  map[int]*Session
	txn       *Session // holder of the transaction lock, or nil
	hostAddrs []netip.Addr
	missing   map[string]bool
	fault     func(Op) error
	observe   func()
	def       *Process
	commits   int
	pending   []pendingEnd // ended dynamic sessions whose objects are still in force
	events    []string
}

// pendingEnd is a dynamic session that ended with its objects left in force: until the next
// Rundown (a crash), or until the transaction lock is free (auto: a close that waited).
type pendingEnd struct {
	s    *Session
	auto bool
}

type phase uint8

const (
	running phase = iota
	booting
)

// New returns an engine in its running phase with no objects.
func New() *Engine {
	e := &Engine{st: newState(), sessions: map[int]*Session{}, missing: map[string]bool{}}
	e.def = &Process{e: e, name: "default"}
	return e
}

// Process returns a new process that opens sessions on e.
func (e *Engine) Process(name string) *Process { return &Process{e: e, name: name} }

// Open opens a session for the engine's default process.
func (e *Engine) Open(o wfp.SessionOptions) (wfp.Session, error) { return e.def.Open(o) }

// AppID resolves path like FwpmGetAppIdFromFileName0 would.
func (e *Engine) AppID(path string) (string, error) { return e.def.AppID(path) }

// SetHostAddrs sets this machine's own addresses (besides loopback), for the loopback
// flag.
func (e *Engine) SetHostAddrs(addrs ...netip.Addr) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hostAddrs = slices.Clone(addrs)
}

// SetMissing makes path unresolvable (as if the file or its volume did not exist): AppID
// and adding a filter naming it fail.
func (e *Engine) SetMissing(path string, missing bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.missing[appKey(path)] = missing
}

// SetFault installs f, called before every call with the lock held; a non-nil error
// fails the call with it (wrapped). f must not call the engine. nil removes it.
func (e *Engine) SetFault(f func(Op) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fault = f
}

// Observe installs f, called after every change that becomes visible (a commit, or a
// change outside a transaction, a session's end, a reboot), without the lock held. It
// may call Classify. nil removes it.
func (e *Engine) Observe(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.observe = f
}

// Commits counts the changes made visible so far (see Observe).
func (e *Engine) Commits() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.commits
}

// ErrFault is wrapped by the errors of calls failed by a fault that returned it.
var ErrFault = errors.New("wfptest: injected fault")

// Reboot ends every session (rolling back any transaction), drops every object that is
// neither persistent nor boot-time, and leaves the engine in its boot phase until Boot.
func (e *Engine) Reboot() {
	e.mu.Lock()
	for _, s := range e.sessions {
		s.end(true)
	}
	e.txn = nil
	e.pending = nil
	st := newState()
	for k, p := range e.st.providers {
		if p.Persistent {
			st.providers[k] = p
		}
	}
	for k, s := range e.st.sublayers {
		if s.Persistent {
			st.sublayers[k] = s
		}
	}
	for k, f := range e.st.filters {
		if f.Persistent || f.BootTime {
			st.filters[k] = f
		}
	}
	e.st = st
	e.phase = booting
	e.commits++
	obs := e.observe
	e.mu.Unlock()
	if obs != nil {
		obs()
	}
}

// Boot ends the boot phase: the BFE has started.
func (e *Engine) Boot() {
	e.mu.Lock()
	e.phase = running
	e.commits++
	obs := e.observe
	e.mu.Unlock()
	if obs != nil {
		obs()
	}
}

// ProcessExit ends s as if its process had died: its transaction is rolled back and, for
// a dynamic session, its objects are deleted (at once; see Process.Crash for the gap).
func (e *Engine) ProcessExit(s *Session) {
	e.mu.Lock()
	changed := s.end(true)
	if changed {
		e.commits++
	}
	obs := e.observe
	e.mu.Unlock()
	if changed && obs != nil {
		obs()
	}
}

// Rundown deletes the objects of the dynamic sessions that ended without them (a crashed
// process's, or a session closed while another held the transaction lock), as the BFE does
// when it gets to them. It does nothing while a transaction is open: the BFE waits for the
// lock. It reports how many sessions were run down.
func (e *Engine) Rundown() int {
	e.mu.Lock()
	if e.txn != nil {
		e.record("rundown waits for the transaction of session %d", e.txn.id)
		e.mu.Unlock()
		return 0
	}
	n, changed := e.rundownLocked()
	if changed {
		e.commits++
	}
	obs := e.observe
	e.mu.Unlock()
	if changed && obs != nil {
		obs()
	}
	return n
}

// rundownLocked deletes the pending sessions' objects; e.mu is held and no transaction is
// open.
func (e *Engine) rundownLocked() (int, bool) {
	return e.dropPendingLocked(func(pendingEnd) bool { return true })
}

// lockFreedLocked runs down the sessions whose close waited for the transaction lock, now
// free; e.mu is held. It reports whether the committed state changed.
func (e *Engine) lockFreedLocked() bool {
	_, changed := e.dropPendingLocked(func(p pendingEnd) bool { return p.auto })
	return changed
}

func (e *Engine) dropPendingLocked(which func(pendingEnd) bool) (int, bool) {
	n, changed := 0, false
	var keep []pendingEnd
	for _, p := range e.pending {
		if !which(p) {
			keep = append(keep, p)
			continue
		}
		n++
		st := e.st.clone()
		if st.dropSession(p.s.id) {
			e.st = st
			changed = true
		}
		e.record("objects of session %d (%s) deleted", p.s.id, p.s.process.name)
	}
	e.pending = keep
	return n, changed
}

// Pending reports how many ended dynamic sessions still have their objects in force.
func (e *Engine) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.pending)
}

// Events returns what happened to sessions so far, in order: processes ending, sessions
// ending, their objects deleted, a rundown waiting for the lock.
func (e *Engine) Events() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

func (e *Engine) record(format string, args ...any) {
	e.events = append(e.events, fmt.Sprintf(format, args...))
}

// Sessions returns the open sessions, in the order they were opened.
func (e *Engine) Sessions() []*Session {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ss []*Session
	for _, s := range e.sessions {
		ss = append(ss, s)
	}
	slices.SortFunc(ss, func(a, b *Session) int { return a.id - b.id })
	return ss
}

// Object lifetimes as the engine records them.
type Lifetime uint8

// The lifetimes.
const (
	Persistent Lifetime = iota + 1
	BootTime
	Static  // added without a lifetime flag by a static session: until Reboot
	Dynamic // added by a dynamic session: until the session ends
)

func (l Lifetime) String() string {
	return [...]string{"", "persistent", "boot-time", "static", "dynamic"}[l]
}

// Installed is a filter in the committed state with its lifetime and owner.
type Installed struct {
	wfp.Filter
	Lifetime Lifetime
	Owner    string // the process that added it
}

// Filters returns every committed filter, sorted by key.
func (e *Engine) Filters() []Installed {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Installed
	for _, f := range e.st.filters {
		out = append(out, Installed{Filter: f.Filter, Lifetime: f.lifetime(), Owner: f.process})
	}
	slices.SortFunc(out, func(a, b Installed) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return out
}

// Sublayers returns every committed sublayer, sorted by key.
func (e *Engine) Sublayers() []wfp.Sublayer {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []wfp.Sublayer
	for _, s := range e.st.sublayers {
		out = append(out, s.Sublayer)
	}
	slices.SortFunc(out, func(a, b wfp.Sublayer) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return out
}

// Providers returns every committed provider, sorted by key.
func (e *Engine) Providers() []wfp.Provider {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []wfp.Provider
	for _, p := range e.st.providers {
		out = append(out, p.Provider)
	}
	slices.SortFunc(out, func(a, b wfp.Provider) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return out
}

// Process is one process's view of the engine: a wfp.Engine whose sessions end together.
type Process struct {
	e    *Engine
	name string
	dead bool // Crash or Exit: Open fails (guarded by e.mu)
}

// Open opens a session. It fails with wfp.CodeEngineNotRunning in the boot phase.
func (p *Process) Open(o wfp.SessionOptions) (wfp.Session, error) {
	e := p.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.check(Op{Name: "open", Process: p.name}); err != nil {
		return nil, fmt.Errorf("open session: %w", err)
	}
	if e.phase == booting {
		return nil, fmt.Errorf("open session: %w", wfp.CodeEngineNotRunning)
	}
	if p.dead {
		return nil, fmt.Errorf("open session: process %s is gone: %w", p.name, wfp.CodeInvalidHandle)
	}
	e.nextID++
	s := &Session{e: e, id: e.nextID, process: p, name: o.Name, dynamic: o.Dynamic}
	e.sessions[s.id] = s
	return s, nil
}

// AppID returns the fake app ID of path: its lower-cased form.
func (p *Process) AppID(path string) (string, error) {
	e := p.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.check(Op{Name: "app-id", Process: p.name}); err != nil {
		return "", fmt.Errorf("app id of %s: %w", path, err)
	}
	return e.appID(path)
}

// Exit ends every session of the process, as if it had died and the BFE had run its
// sessions down at once. The process may open sessions again (a test's shortcut for a
// new process with the same name).
func (p *Process) Exit() {
	p.exit(true)
}

// Crash ends every session of the process as TerminateProcess does: the sessions are
// gone (their transactions rolled back), but the objects of the dynamic ones stay in force
// until Engine.Rundown. The process opens no session afterwards.
func (p *Process) Crash() {
	p.exit(false)
}

func (p *Process) exit(rundown bool) {
	e := p.e
	e.mu.Lock()
	p.dead = p.dead || !rundown
	e.record("process %s ends", p.name)
	changed := false
	for _, s := range e.sessions {
		if s.process == p {
			changed = s.end(rundown) || changed
		}
	}
	if changed {
		e.commits++
	}
	obs := e.observe
	e.mu.Unlock()
	if changed && obs != nil {
		obs()
	}
}

func (e *Engine) appID(path string) (string, error) {
	if !isAbsWindows(path) {
		return "", fmt.Errorf("app id of %q: not an absolute path: %w", path, wfp.Code(161)) // ERROR_BAD_PATHNAME
	}
	k := appKey(path)
	if e.missing[k] {
		return "", fmt.Errorf("app id of %s: %w", path, wfp.Code(2)) // ERROR_FILE_NOT_FOUND
	}
	return k, nil
}

func appKey(path string) string { return strings.ToLower(strings.ReplaceAll(path, "/", `\`)) }

func isAbsWindows(p string) bool {
	if strings.HasPrefix(p, `\\`) {
		return true
	}
	return len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/') &&
		(p[0]|0x20 >= 'a' && p[0]|0x20 <= 'z')
}

func (e *Engine) check(op Op) error {
	if e.fault == nil {
		return nil
	}
	if err := e.fault(op); err != nil {
		return fmt.Errorf("%w: %w", ErrFault, err)
	}
	return nil
}
