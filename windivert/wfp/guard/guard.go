package guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentcage/router/windivert/wfp"
)

// Guard installs, arms, disarms and removes the guard's objects in a filtering engine.
//
// States and what is enforced in each (see the package doc for the why):
//
//	(nothing)  --Install-->  installed: persistent blocks; caged apps blocked
//	installed  --Arm------>  armed: + dynamic permits; caged apps pass to the capture
//	armed      --Disarm--->  installed (also: the process ends, however; Windows drops them)
//	any        --Remove--->  (nothing): everything of the guard's provider deleted
//
// Install while armed (a reload) replaces the persistent objects in one transaction, then
// the dynamic permits in a second one on the dynamic session (a dynamic session cannot
// hold persistent objects, so one transaction cannot do both). Between the two, an app
// the reload newly cages is blocked and an app it frees is passed: nothing the new config
// cages is ever let through without the capture.
//
// A Guard is safe for concurrent use; mu serializes every method and guards the fields
// below it. The Guard owns the dynamic session it opens; Disarm (or Remove) closes it.
type Guard struct {
	eng   wfp.Engine
	log   *slog.Logger
	owner uint32 // the process whose permits these are (0: untagged)

	mu     sync.Mutex
	plan   *Plan       // the plan last installed by this Guard, nil before
	dyn    wfp.Session // the dynamic session while armed, nil otherwise
	sealed bool        // Seal was called: Arm fails
}

// New returns a Guard over eng that logs to log (nil: discard), whose permits are not
// tagged with an owner.
func New(eng wfp.Engine, log *slog.Logger) *Guard { return NewFor(eng, log, 0) }

// NewFor returns a Guard whose permits are tagged with owner, the process that arms it:
// their keys and names carry its PID, so that another process (Hold, the next router after
// a crash) tells them from a later router's and waits for, or deletes, exactly those.
func NewFor(eng wfp.Engine, log *slog.Logger, owner uint32) *Guard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Guard{eng: eng, log: log, owner: owner}
}

// ownerTag is the suffix of the names of the permits owner armed ("" for 0).
func ownerTag(owner uint32) string {
	if owner == 0 {
		return ""
	}
	return fmt.Sprintf(" [pid %d]", owner)
}

// ownedBy returns the plan's permits as owner arms them.
func ownedBy(fs []wfp.Filter, owner uint32) []wfp.Filter {
	if owner == 0 {
		return fs
	}
	out := make([]wfp.Filter, len(fs))
	for i, f := range fs {
		f.Key = wfp.NameKey(f.Key, fmt.Sprint(owner))
		f.Name += ownerTag(owner)
		out[i] = f
	}
	return out
}

// Report says what Install changed.
type Report struct {
	Added, Deleted, Kept int
	// Unresolvable are caged apps the engine could not turn into app IDs (the file or its
	// volume is gone); the installed plan leaves them out, so they are not guarded.
	Unresolvable []string
}

// Install reconciles the engine with p's persistent objects in one transaction: it adds
// the provider and sublayer if missing (rebuilding the sublayer if its settings changed),
// deletes the persistent and boot-time filters of the guard's provider that p does not
// have or has in another form, and adds those missing. Unchanged filters are left alone
// (re-adding would make Windows re-authorize every connection). Dynamic filters are not
// touched, except by the re-arm that follows when the Guard is armed.
//
// On error nothing changed (the transaction is aborted): whatever guard was installed
// before is still enforced.
func (g *Guard) Install(p Plan) (Report, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var rep Report
	for _, a := range p.Env.CagedApps {
		if _, err := g.eng.AppID(a); err != nil {
			g.log.Warn("guard: a caged app cannot be named in WFP, it is left out", "app", a, "err", err)
			rep.Unresolvable = append(rep.Unresolvable, a)
		}
	}
	if len(rep.Unresolvable) > 0 {
		env := p.Env
		env.CagedApps = slices.DeleteFunc(slices.Clone(env.CagedApps), func(a string) bool { return slices.Contains(rep.Unresolvable, a) })
		var err error
		if p, err = NewPlan(env); err != nil {
			return rep, fmt.Errorf("install guard: %w", err)
		}
	}
	s, err := g.eng.Open(wfp.SessionOptions{Name: "router guard install"})
	if err != nil {
		return rep, fmt.Errorf("install guard: %w", err)
	}
	defer s.Close()
	if err := inTxn(s, func() error { return reconcile(s, p, &rep) }); err != nil {
		return rep, fmt.Errorf("install guard: %w", err)
	}
	g.plan = &p
	g.log.Info("guard: installed", "added", rep.Added, "deleted", rep.Deleted, "kept", rep.Kept, "caged_apps", len(p.Env.CagedApps))
	if g.dyn != nil {
		if err := g.arm(); err != nil {
			return rep, fmt.Errorf("install guard: re-arm: %w", err)
		}
	}
	return rep, nil
}

// inTxn runs f in a transaction on s: Commit when f succeeds, Abort otherwise.
func inTxn(s wfp.Session, f func() error) error {
	if err := s.Begin(); err != nil {
		return err
	}
	if err := f(); err != nil {
		if aerr := s.Abort(); aerr != nil {
			return errors.Join(err, fmt.Errorf("abort: %w", aerr))
		}
		return err
	}
	return s.Commit()
}

func reconcile(s wfp.Session, p Plan, rep *Report) error {
	if _, err := s.Provider(p.Provider.Key); errors.Is(err, wfp.ErrNotFound) {
		if err := s.AddProvider(p.Provider); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	have, err := s.Filters(p.Provider.Key)
	if err != nil {
		return err
	}
	rebuild := false
	switch sl, err := s.Sublayer(p.Sublayer.Key); {
	case errors.Is(err, wfp.ErrNotFound):
		rebuild = true
	case err != nil:
		return err
	case sl != p.Sublayer:
		// Its weight or name changed: a sublayer cannot be changed in place. Every
		// filter in it goes (a running router's permits too; it re-arms on reload).
		for _, f := range have {
			if f.Sublayer == sl.Key {
				if err := s.DeleteFilter(f.Key); err != nil {
					return err
				}
				rep.Deleted++
			}
		}
		if err := s.DeleteSublayer(sl.Key); err != nil {
			return err
		}
		rebuild = true
	}
	if rebuild {
		if err := s.AddSublayer(p.Sublayer); err != nil {
			return err
		}
	}
	want := map[wfp.Key]wfp.Filter{}
	for _, f := range p.Persistent {
		want[f.Key] = f
	}
	kept := map[wfp.Key]bool{}
	for _, f := range have {
		if !f.Persistent && !f.BootTime {
			continue // a dynamic session's: Arm's business
		}
		if rebuild && f.Sublayer == p.Sublayer.Key {
			continue // deleted with the old sublayer
		}
		if w, ok := want[f.Key]; ok && bytes.Equal(w.Digest, f.Digest) && f.Sublayer == w.Sublayer && !rebuild {
			kept[f.Key] = true
			rep.Kept++
			continue
		}
		if err := s.DeleteFilter(f.Key); err != nil {
			return err
		}
		rep.Deleted++
	}
	for _, f := range p.Persistent {
		if kept[f.Key] {
			continue
		}
		if err := s.AddFilter(f); err != nil {
			return err
		}
		rep.Added++
	}
	return nil
}

// Arm adds the dynamic permits of the plan last installed, in one transaction of a
// dynamic session the Guard keeps open: from then on caged apps reach the capture, and
// the router's listeners, DNS and forwards are reachable. Call it only once the capture
// runs (listeners open, WinDivert open, engine reading). Arming again replaces the
// permits with the current plan's (a reload). On error no permit was added.
//
// Windows deletes the permits when the session closes or the process ends, however it
// ends: a crash leaves the persistent blocks alone.
func (g *Guard) Arm() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.plan == nil {
		return errors.New("arm guard: install it first")
	}
	if g.sealed {
		return errors.New("arm guard: sealed (the capture failed or stopped)")
	}
	if err := g.arm(); err != nil {
		return fmt.Errorf("arm guard: %w", err)
	}
	g.log.Info("guard: armed", "permits", len(g.plan.Dynamic))
	return nil
}

func (g *Guard) arm() error {
	fresh := g.dyn == nil
	if fresh {
		s, err := g.eng.Open(wfp.SessionOptions{Name: "router guard permits (while the router runs)", Dynamic: true})
		if err != nil {
			return err
		}
		g.dyn = s
	}
	err := inTxn(g.dyn, func() error {
		have, err := g.dyn.Filters(ProviderKey)
		if err != nil {
			return err
		}
		// Every dynamic filter of the provider not in want goes: a reload's old permits,
		// and a crashed router's that Windows has not yet run down.
		dyn := ownedBy(g.plan.Dynamic, g.owner)
		want := map[wfp.Key]wfp.Filter{}
		for _, f := range dyn {
			want[f.Key] = f
		}
		kept := map[wfp.Key]bool{}
		for _, f := range have {
			if f.Persistent || f.BootTime {
				continue
			}
			if w, ok := want[f.Key]; ok && bytes.Equal(w.Digest, f.Digest) {
				kept[f.Key] = true
				continue
			}
			if err := g.dyn.DeleteFilter(f.Key); err != nil && !errors.Is(err, wfp.ErrNotFound) {
				return err
			}
		}
		for _, f := range dyn {
			if !kept[f.Key] {
				if err := g.dyn.AddFilter(f); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil && fresh {
		g.dyn.Close()
		g.dyn = nil
	}
	return err
}

// Disarm drops the dynamic permits (in one transaction) and closes the dynamic session,
// which drops them in any case: when Disarm returns, caged apps are blocked again even if
// it reports an error. Call it first when stopping or when the capture fails, before
// closing WinDivert. Disarming a disarmed Guard does nothing.
func (g *Guard) Disarm() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.disarm()
}

func (g *Guard) disarm() error {
	if g.dyn == nil {
		return nil
	}
	s := g.dyn
	g.dyn = nil
	err := inTxn(s, func() error {
		have, err := s.Filters(ProviderKey)
		if err != nil {
			return err
		}
		for _, f := range have {
			if !f.Persistent && !f.BootTime {
				if err := s.DeleteFilter(f.Key); err != nil && !errors.Is(err, wfp.ErrNotFound) {
					return err
				}
			}
		}
		return nil
	})
	if cerr := s.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return fmt.Errorf("disarm guard: %w", err)
	}
	g.log.Info("guard: disarmed")
	return nil
}

// Seal disarms the Guard and keeps it disarmed: Arm fails from then on, and a later Install
// does not re-arm. The capture's failure path calls it, so that an Arm racing the failure
// cannot put the permits back with nothing capturing.
func (g *Guard) Seal() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sealed = true
	return g.disarm()
}

// Permits counts the dynamic filters of the guard's provider that owner armed (owner 0:
// every dynamic filter of the provider), as the engine enforces them now: a dead or closed
// session's permits count until Windows has deleted them.
func Permits(eng wfp.Engine, owner uint32) (int, error) {
	s, err := eng.Open(wfp.SessionOptions{Name: "router guard check"})
	if err != nil {
		return 0, fmt.Errorf("count permits: %w", err)
	}
	defer s.Close()
	have, err := s.Filters(ProviderKey)
	if err != nil {
		return 0, fmt.Errorf("count permits: %w", err)
	}
	n := 0
	tag := ownerTag(owner)
	for _, f := range have {
		if !f.Persistent && !f.BootTime && strings.HasSuffix(f.Name, tag) {
			n++
		}
	}
	return n, nil
}

// WaitNoPermits returns once Permits(eng, owner) is 0, polling every poll, or ctx's error.
// Disarming deletes the permits, but when its transaction times out (another tool holds the
// lock) Windows deletes them only later: until then the capture must stay open.
func WaitNoPermits(ctx context.Context, eng wfp.Engine, owner uint32, poll time.Duration) error {
	if poll <= 0 {
		poll = 10 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	var last error
	for {
		n, err := Permits(eng, owner)
		if err == nil && n == 0 {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("wait for the permits to go: %w (last: %w)", ctx.Err(), last)
			}
			return fmt.Errorf("wait for the permits to go: %d still in force: %w", n, ctx.Err())
		case <-t.C:
		}
	}
}

// HoldConfig configures Hold.
type HoldConfig struct {
	WFP   wfp.Engine
	Owner uint32        // the router's PID, whose permits are waited for
	Poll  time.Duration // how often the permits are counted (0: 10 ms)
	// Parent is closed when the router's process has ended (however); Stop when the
	// router lets the holder go after its own disarm.
	Parent, Stop <-chan struct{}
}

// Hold is the holder's logic: it returns once the router is gone or lets go (Parent or
// Stop) and then its permits are gone too, or with ctx's error. Until it returns, the
// holder keeps its reference to the router's diverting WinDivert handle: when the router
// dies the kernel closes its own handles at once, but Windows deletes its dynamic permits
// only when the BFE runs the dead session down; meanwhile the caged apps' packets still
// divert into the held handle, where nobody reads them, and are dropped.
func Hold(ctx context.Context, c HoldConfig) error {
	select {
	case <-c.Parent:
	case <-c.Stop:
	case <-ctx.Done():
		return fmt.Errorf("hold: %w", ctx.Err())
	}
	if err := WaitNoPermits(ctx, c.WFP, c.Owner, c.Poll); err != nil {
		return fmt.Errorf("hold: %w", err)
	}
	return nil
}

// Remove deletes everything of the guard's provider, whoever added it and whatever its
// lifetime (a running router's permits too), then its sublayer and provider, in one
// transaction: afterwards nothing of the guard is left, and caged apps are no longer
// blocked. It disarms this Guard first. It returns the number of filters deleted; a
// machine without the guard gives 0 and no error.
func (g *Guard) Remove() (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	derr := g.disarm()
	s, err := g.eng.Open(wfp.SessionOptions{Name: "router guard remove"})
	if err != nil {
		return 0, fmt.Errorf("remove guard: %w", errors.Join(derr, err))
	}
	defer s.Close()
	n := 0
	err = inTxn(s, func() error {
		n = 0
		have, err := s.Filters(ProviderKey)
		if err != nil {
			return err
		}
		for _, f := range have {
			if err := s.DeleteFilter(f.Key); err != nil && !errors.Is(err, wfp.ErrNotFound) {
				return err
			}
			n++
		}
		if err := s.DeleteSublayer(SublayerKey); err != nil && !errors.Is(err, wfp.ErrNotFound) {
			return err
		}
		if err := s.DeleteProvider(ProviderKey); err != nil && !errors.Is(err, wfp.ErrNotFound) {
			return err
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("remove guard: %w", err)
	}
	g.plan = nil
	g.log.Info("guard: removed", "filters", n)
	return n, nil
}

// Damage reports what of the guard the engine lacks, as this Guard installed and armed it:
// persistent filters deleted or changed by someone else, the sublayer or provider gone, and
// while armed, its permits. "" when intact (or nothing installed yet).
func (g *Guard) Damage() (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.plan == nil {
		return "", nil
	}
	s, err := g.eng.Open(wfp.SessionOptions{Name: "router guard check"})
	if err != nil {
		return "", fmt.Errorf("check guard: %w", err)
	}
	defer s.Close()
	if _, err := s.Sublayer(SublayerKey); errors.Is(err, wfp.ErrNotFound) {
		return "the guard's sublayer is gone", nil
	} else if err != nil {
		return "", fmt.Errorf("check guard: %w", err)
	}
	have, err := s.Filters(ProviderKey)
	if err != nil {
		return "", fmt.Errorf("check guard: %w", err)
	}
	got := map[wfp.Key][]byte{}
	for _, f := range have {
		got[f.Key] = f.Digest
	}
	want := g.plan.Persistent
	if g.dyn != nil {
		want = append(slices.Clone(want), ownedBy(g.plan.Dynamic, g.owner)...)
	}
	var missing []string
	for _, f := range want {
		if d, ok := got[f.Key]; !ok || !bytes.Equal(d, f.Digest) {
			missing = append(missing, f.Name)
		}
	}
	if len(missing) == 0 {
		return "", nil
	}
	if len(missing) > 3 {
		missing = append(missing[:3], fmt.Sprintf("and %d more", len(missing)-3))
	}
	return "filters missing or changed: " + strings.Join(missing, "; "), nil
}

// Armed reports whether the Guard holds its dynamic permits.
func (g *Guard) Armed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dyn != nil
}
