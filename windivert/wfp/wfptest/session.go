package wfptest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentcage/router/windivert/wfp"
)

// state is one version of the engine's objects. Values are never changed in place: a
// transaction works on a clone and replaces the committed state at Commit.
type state struct {
	providers map[wfp.Key]provider
	sublayers map[wfp.Key]sublayer
	filters   map[wfp.Key]filter
}

// owner records who added an object.
type owner struct {
	session int
	dynamic bool // added by a dynamic session
	process string
}

type provider struct {
	wfp.Provider
	owner
}

type sublayer struct {
	wfp.Sublayer
	owner
}

type filter struct {
	wfp.Filter
	owner
}

func (f filter) lifetime() Lifetime {
	switch {
	case f.Persistent:
		return Persistent
	case f.BootTime:
		return BootTime
	case f.dynamic:
		return Dynamic
	}
	return Static
}

func newState() *state {
	return &state{providers: map[wfp.Key]provider{}, sublayers: map[wfp.Key]sublayer{}, filters: map[wfp.Key]filter{}}
}

func (s *state) clone() *state {
	c := newState()
	for k, v := range s.providers {
		c.providers[k] = v
	}
	for k, v := range s.sublayers {
		c.sublayers[k] = v
	}
	for k, v := range s.filters {
		c.filters[k] = v
	}
	return c
}

// dropSession deletes the non-persistent objects a dynamic session added, and filters
// left without their sublayer. It reports whether anything was deleted.
func (s *state) dropSession(id int) bool {
	changed := false
	for k, f := range s.filters {
		if f.session == id && f.dynamic && !f.Persistent && !f.BootTime {
			delete(s.filters, k)
			changed = true
		}
	}
	for k, sl := range s.sublayers {
		if sl.session == id && sl.dynamic && !sl.Persistent {
			delete(s.sublayers, k)
			changed = true
		}
	}
	for k, p := range s.providers {
		if p.session == id && p.dynamic && !p.Persistent {
			delete(s.providers, k)
			changed = true
		}
	}
	for k, f := range s.filters {
		if _, ok := s.sublayers[f.Sublayer]; !ok {
			delete(s.filters, k)
			changed = true
		}
	}
	return changed
}

// Session is a session of the fake engine; it implements wfp.Session.
type Session struct {
	e       *Engine
	id      int
	process *Process
	name    string
	dynamic bool
	closed  bool
	work    *state // the transaction's state, nil outside a transaction
}

// Dynamic reports whether the session is dynamic.
func (s *Session) Dynamic() bool { return s.dynamic }

// Process returns the name of the process that opened the session.
func (s *Session) Process() string { return s.process.name }

// Name returns the name the session was opened with.
func (s *Session) Name() string { return s.name }

// end closes s: its transaction rolls back and a dynamic session's objects are deleted,
// now when rundown is set and no other session holds a transaction, otherwise at the next
// Rundown (or the end of that transaction). It reports whether the committed state changed.
// e.mu is held.
func (s *Session) end(rundown bool) bool {
	if s.closed {
		return false
	}
	e := s.e
	s.closed = true
	delete(e.sessions, s.id)
	freed := false
	if e.txn == s {
		e.txn = nil
		freed = true
	}
	s.work = nil
	e.record("session %d (%s) ends", s.id, s.process.name)
	if !s.dynamic {
		return freed && e.lockFreedLocked()
	}
	if !rundown || e.txn != nil {
		e.pending = append(e.pending, pendingEnd{s: s, auto: rundown})
		e.record("objects of session %d (%s) stay in force for now", s.id, s.process.name)
		return freed && e.lockFreedLocked()
	}
	if freed {
		e.lockFreedLocked()
	}
	e.record("objects of session %d (%s) deleted", s.id, s.process.name)
	// Copies, not changes in place: a reader may still hold the old state.
	if e.txn != nil && e.txn.work != nil {
		w := e.txn.work.clone()
		w.dropSession(s.id)
		e.txn.work = w
	}
	st := e.st.clone()
	if !st.dropSession(s.id) {
		return false
	}
	e.st = st
	return true
}

func (s *Session) usable() error {
	if s.closed {
		return wfp.CodeInvalidHandle
	}
	return nil
}

func (s *Session) owner() owner {
	return owner{session: s.id, dynamic: s.dynamic, process: s.process.name}
}

// change runs f on the transaction's state, or, outside a transaction, on a copy of the
// committed state that replaces it when f succeeds.
func (s *Session) change(op Op, what string, f func(st *state) error) error {
	e := s.e
	op.Process = s.process.name
	e.mu.Lock()
	err := s.usable()
	if err == nil {
		err = e.check(op)
	}
	if err == nil && e.txn != nil && e.txn != s {
		err = wfp.CodeTimeout
	}
	if err != nil {
		e.mu.Unlock()
		return fmt.Errorf("%s: %w", what, err)
	}
	if s.work != nil {
		err := f(s.work)
		e.mu.Unlock()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	work := e.st.clone()
	if err := f(work); err != nil {
		e.mu.Unlock()
		return fmt.Errorf("%s: %w", what, err)
	}
	e.st = work
	e.commits++
	obs := e.observe
	e.mu.Unlock()
	if obs != nil {
		obs()
	}
	return nil
}

// Begin starts a transaction.
func (s *Session) Begin() error {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := s.usable(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := e.check(Op{Name: "begin", Process: s.process.name}); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	switch {
	case s.work != nil:
		return fmt.Errorf("begin transaction: %w", wfp.CodeTxnInProgress)
	case e.txn != nil:
		return fmt.Errorf("begin transaction: %w", wfp.CodeTimeout)
	}
	e.txn = s
	s.work = e.st.clone()
	return nil
}

// Commit makes the transaction's changes visible at once. A failed Commit rolls back.
func (s *Session) Commit() error {
	e := s.e
	e.mu.Lock()
	if err := s.usable(); err != nil {
		e.mu.Unlock()
		return fmt.Errorf("commit transaction: %w", err)
	}
	if s.work == nil {
		e.mu.Unlock()
		return fmt.Errorf("commit transaction: %w", wfp.CodeNoTxn)
	}
	work := s.work
	s.work, e.txn = nil, nil
	if err := e.check(Op{Name: "commit", Process: s.process.name}); err != nil {
		changed := e.lockFreedLocked()
		if changed {
			e.commits++
		}
		obs := e.observe
		e.mu.Unlock()
		if changed && obs != nil {
			obs()
		}
		return fmt.Errorf("commit transaction: %w", err)
	}
	e.st = work
	e.lockFreedLocked()
	e.commits++
	obs := e.observe
	e.mu.Unlock()
	if obs != nil {
		obs()
	}
	return nil
}

// Abort rolls the transaction back.
func (s *Session) Abort() error {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := s.usable(); err != nil {
		return fmt.Errorf("abort transaction: %w", err)
	}
	if s.work == nil {
		return fmt.Errorf("abort transaction: %w", wfp.CodeNoTxn)
	}
	s.work, e.txn = nil, nil
	if e.lockFreedLocked() {
		e.commits++
		if obs := e.observe; obs != nil {
			e.mu.Unlock()
			obs()
			e.mu.Lock()
		}
	}
	return nil
}

// Close ends the session (see Engine.ProcessExit for what goes with it).
func (s *Session) Close() error {
	e := s.e
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
	return nil
}

// AddProvider adds p.
func (s *Session) AddProvider(p wfp.Provider) error {
	return s.change(Op{Name: "add-provider", Key: p.Key}, "add provider "+p.Key.String(), func(st *state) error {
		switch {
		case p.Key.IsZero():
			return wfp.Code(87) // ERROR_INVALID_PARAMETER
		case s.dynamic && p.Persistent:
			return wfp.CodeDynamicSession
		}
		if _, ok := st.providers[p.Key]; ok {
			return wfp.CodeAlreadyExists
		}
		st.providers[p.Key] = provider{p, s.owner()}
		return nil
	})
}

// DeleteProvider deletes the provider with key k; no sublayer or filter may name it.
func (s *Session) DeleteProvider(k wfp.Key) error {
	return s.change(Op{Name: "delete-provider", Key: k}, "delete provider "+k.String(), func(st *state) error {
		if _, ok := st.providers[k]; !ok {
			return wfp.CodeProviderNotFound
		}
		for _, sl := range st.sublayers {
			if sl.Provider == k {
				return wfp.CodeInUse
			}
		}
		for _, f := range st.filters {
			if f.Provider == k {
				return wfp.CodeInUse
			}
		}
		delete(st.providers, k)
		return nil
	})
}

// Provider returns the provider with key k.
func (s *Session) Provider(k wfp.Key) (wfp.Provider, error) {
	st, err := s.read(Op{Name: "provider", Key: k})
	if err != nil {
		return wfp.Provider{}, fmt.Errorf("get provider %v: %w", k, err)
	}
	p, ok := st.providers[k]
	if !ok {
		return wfp.Provider{}, fmt.Errorf("get provider %v: %w", k, wfp.CodeProviderNotFound)
	}
	return p.Provider, nil
}

// AddSublayer adds sl.
func (s *Session) AddSublayer(sl wfp.Sublayer) error {
	return s.change(Op{Name: "add-sublayer", Key: sl.Key}, "add sublayer "+sl.Key.String(), func(st *state) error {
		switch {
		case sl.Key.IsZero():
			return wfp.Code(87)
		case s.dynamic && sl.Persistent:
			return wfp.CodeDynamicSession
		}
		if _, ok := st.sublayers[sl.Key]; ok {
			return wfp.CodeAlreadyExists
		}
		if !sl.Provider.IsZero() {
			p, ok := st.providers[sl.Provider]
			if !ok {
				return wfp.CodeProviderNotFound
			}
			if sl.Persistent && !p.Persistent {
				return wfp.CodeLifetimeMismatch
			}
		}
		st.sublayers[sl.Key] = sublayer{sl, s.owner()}
		return nil
	})
}

// DeleteSublayer deletes the sublayer with key k; it must hold no filter.
func (s *Session) DeleteSublayer(k wfp.Key) error {
	return s.change(Op{Name: "delete-sublayer", Key: k}, "delete sublayer "+k.String(), func(st *state) error {
		if _, ok := st.sublayers[k]; !ok {
			return wfp.CodeSublayerNotFound
		}
		for _, f := range st.filters {
			if f.Sublayer == k {
				return wfp.CodeInUse
			}
		}
		delete(st.sublayers, k)
		return nil
	})
}

// Sublayer returns the sublayer with key k.
func (s *Session) Sublayer(k wfp.Key) (wfp.Sublayer, error) {
	st, err := s.read(Op{Name: "sublayer", Key: k})
	if err != nil {
		return wfp.Sublayer{}, fmt.Errorf("get sublayer %v: %w", k, err)
	}
	sl, ok := st.sublayers[k]
	if !ok {
		return wfp.Sublayer{}, fmt.Errorf("get sublayer %v: %w", k, wfp.CodeSublayerNotFound)
	}
	return sl.Sublayer, nil
}

// AddFilter adds f after the checks Windows makes (see the package doc).
func (s *Session) AddFilter(f wfp.Filter) error {
	return s.change(Op{Name: "add-filter", Key: f.Key}, fmt.Sprintf("add filter %q", f.Name), func(st *state) error {
		if err := f.Validate(); err != nil {
			return fmt.Errorf("%w: %w", err, wfp.Code(87))
		}
		lasting := f.Persistent || f.BootTime
		if s.dynamic && lasting {
			return wfp.CodeDynamicSession
		}
		if _, ok := st.filters[f.Key]; ok {
			return wfp.CodeAlreadyExists
		}
		sl, ok := st.sublayers[f.Sublayer]
		if !ok {
			return wfp.CodeSublayerNotFound
		}
		if lasting && !sl.Persistent {
			return wfp.CodeLifetimeMismatch
		}
		if !f.Provider.IsZero() {
			p, ok := st.providers[f.Provider]
			if !ok {
				return wfp.CodeProviderNotFound
			}
			if lasting && !p.Persistent {
				return wfp.CodeLifetimeMismatch
			}
		}
		for _, c := range f.Conditions {
			if c.Field == wfp.FieldApp {
				if _, err := s.e.appID(c.Path); err != nil {
					return err
				}
			}
		}
		f.Conditions = slices.Clone(f.Conditions)
		f.Digest = slices.Clone(f.Digest)
		st.filters[f.Key] = filter{f, s.owner()}
		return nil
	})
}

// DeleteFilter deletes the filter with key k, whoever added it.
func (s *Session) DeleteFilter(k wfp.Key) error {
	return s.change(Op{Name: "delete-filter", Key: k}, "delete filter "+k.String(), func(st *state) error {
		if _, ok := st.filters[k]; !ok {
			return wfp.CodeFilterNotFound
		}
		delete(st.filters, k)
		return nil
	})
}

// Filters lists provider's filters (boot-time ones included), sorted by key.
func (s *Session) Filters(prov wfp.Key) ([]wfp.Filter, error) {
	return s.listFilters(Op{Name: "filters", Key: prov}, func(f wfp.Filter) bool { return f.Provider == prov })
}

// listFilters lists (copies of) the filters s sees that keep says to, sorted by key.
func (s *Session) listFilters(op Op, keep func(wfp.Filter) bool) ([]wfp.Filter, error) {
	st, err := s.read(op)
	if err != nil {
		return nil, fmt.Errorf("list filters: %w", err)
	}
	var out []wfp.Filter
	for _, f := range st.filters {
		if keep(f.Filter) {
			g := f.Filter
			g.Conditions = slices.Clone(g.Conditions)
			g.Digest = slices.Clone(g.Digest)
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b wfp.Filter) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return out, nil
}

// read returns the state s sees: its transaction's, or the committed one.
func (s *Session) read(op Op) (*state, error) {
	e := s.e
	op.Process = s.process.name
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := e.check(op); err != nil {
		return nil, err
	}
	if s.work != nil {
		return s.work, nil
	}
	return e.st, nil
}

// AllSublayers lists every sublayer, sorted by key.
func (s *Session) AllSublayers() ([]wfp.Sublayer, error) {
	st, err := s.read(Op{Name: "sublayers"})
	if err != nil {
		return nil, fmt.Errorf("list sublayers: %w", err)
	}
	var out []wfp.Sublayer
	for _, sl := range st.sublayers {
		out = append(out, sl.Sublayer)
	}
	slices.SortFunc(out, func(a, b wfp.Sublayer) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return out, nil
}

// LayerFilters lists every filter at layer l (boot-time ones included), sorted by key.
func (s *Session) LayerFilters(l wfp.Layer) ([]wfp.Filter, error) {
	return s.listFilters(Op{Name: "filters"}, func(f wfp.Filter) bool { return f.Layer == l })
}
