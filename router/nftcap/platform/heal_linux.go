package platform

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/router/nftcap"
)

// healer keeps the capture table in place while the daemon runs. Something else may take it
// away at any time: `nft flush ruleset` (what a reload of the nftables service or of
// firewalld does), an admin's script, `router cleanup` from another shell. Without the
// table the guests' traffic leaves direct, so the healer watches the kernel's nftables
// events and, when a change touches the table, checks it against what was installed
// (nftcap.Check: every chain, its rule count, the VM network sets) and installs it again,
// whole and atomically, if anything differs. The restore is logged at error level and
// counted (GuardStatus). A subscription that breaks (lost events) is renewed and followed
// by a check; a slow periodic check covers anything else.
//
// It also keeps the caged interfaces current: an interface that gets an address inside a
// VM network after the install (a hypervisor network started later) is caged whole at
// once, not at the next reload.
//
// Lifecycle: the first install starts the loop; close stops it and leaves the table. mu
// serialises installs, checks and restores, and guards every field below it.
type healer struct {
	log    *slog.Logger
	ops    tableOps
	every  time.Duration // periodic check
	settle time.Duration // quiet time after an interface event before the interfaces are read

	mu      sync.Mutex
	cfg     *conf.Config
	spec    nftcap.Spec // what is installed (or should be)
	stats   capture.GuardStatus
	stop    chan struct{} // nil until the loop runs
	done    chan struct{}
	backoff time.Duration // delay before the next restore attempt after a failed one
}

// tableOps are the healer's ways to the kernel and the machine; nftcap's and the
// interface list in production, fakes in tests.
type tableOps struct {
	spec    func(*conf.Config) nftcap.Spec // the table a config asks for, with today's interfaces
	install func(nftcap.Spec) error
	check   func(nftcap.Spec) (damage string, err error)
	// watch subscribes to the kernel's changes of a table; stop ends the subscription.
	watch func(table string) (changes <-chan nftcap.Change, stop func(), err error)
	// links delivers a value whenever an interface or an address comes or goes (nil:
	// never); stop ends it.
	links func() (events <-chan struct{}, stop func(), err error)
	save  func(config string, s nftcap.Spec) error // record the last good guard
	now   func() time.Time
}

// nftOps are the production tableOps.
func nftOps() tableOps {
	return tableOps{
		spec:    Spec,
		install: func(s nftcap.Spec) error { return nftcap.Install(s) },
		check:   func(s nftcap.Spec) (string, error) { return nftcap.Check(s) },
		watch: func(table string) (<-chan nftcap.Change, func(), error) {
			w, err := nftcap.Watch(table)
			if err != nil {
				return nil, nil, err
			}
			return w.Changes(), func() { w.Close() }, nil
		},
		links: linkEvents,
		save:  saveGuard,
		now:   time.Now,
	}
}

func newHealer(log *slog.Logger, ops tableOps) *healer {
	return &healer{log: log, ops: ops, every: 5 * time.Second, settle: 50 * time.Millisecond}
}

// Restore attempts after a failed one wait from minBackoff, doubling up to maxBackoff.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// install installs the table for cfg and makes it the one the healer keeps; the first call
// starts the loop. A failed install changes nothing (the table, and what is kept, stay).
func (h *healer) install(cfg *conf.Config) error {
	h.mu.Lock()
	s := h.ops.spec(cfg)
	if err := h.ops.install(s); err != nil {
		h.mu.Unlock()
		return err
	}
	h.cfg, h.spec = cfg, s
	if h.stop == nil {
		h.stop, h.done = make(chan struct{}), make(chan struct{})
		go h.run(h.stop, h.done)
	}
	h.mu.Unlock()
	// The table is in place; a state directory that cannot be written costs the boot unit
	// its fallback, not the running guard.
	if err := h.ops.save(cfg.File, s); err != nil {
		h.log.Warn("the last good guard was not saved: a boot whose config cannot be read will not find it", "err", err)
	}
	return nil
}

// close stops watching; the table stays. It is safe to call more than once and before
// install.
func (h *healer) close() {
	h.mu.Lock()
	stop, done := h.stop, h.done
	h.stop = nil
	h.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// status returns the restores so far.
func (h *healer) status() capture.GuardStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.stats
	st.Watched = true
	return st
}

// run is the loop: kernel changes, interface changes, the periodic check, restore retries.
func (h *healer) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	h.mu.Lock()
	table := h.spec.Table
	h.mu.Unlock()

	var links <-chan struct{}
	if h.ops.links != nil {
		ev, stopLinks, err := h.ops.links()
		if err != nil {
			h.log.Warn("interfaces are not watched: an interface that appears later is caged whole only at the next reload", "err", err)
		} else {
			links = ev
			defer stopLinks()
		}
	}
	var changes <-chan nftcap.Change
	stopWatch := func() {}
	defer func() { stopWatch() }()

	tick := time.NewTicker(h.every)
	defer tick.Stop()
	subscribe := time.NewTimer(0) // at once
	defer subscribe.Stop()
	retry := newStoppedTimer()
	defer retry.Stop()
	settle := newStoppedTimer()
	defer settle.Stop()
	subBackoff := minBackoff

	verify := func(ch nftcap.Change) {
		if again := h.verify(ch); again > 0 {
			retry.Reset(again)
		}
	}
	for {
		select {
		case <-stop:
			return
		case <-subscribe.C:
			c, s, err := h.ops.watch(table)
			if err != nil {
				h.log.Error("the guard's table is not watched: changes to it are found by the periodic check only", "table", table, "err", err, "retry_in", subBackoff)
				subscribe.Reset(subBackoff)
				subBackoff = min(2*subBackoff, maxBackoff)
			} else {
				changes, stopWatch, subBackoff = c, s, minBackoff
			}
			verify(nftcap.Change{}) // whatever happened before the subscription
		case ch, ok := <-changes:
			if !ok || ch.Err != nil {
				stopWatch()
				changes, stopWatch = nil, func() {}
				h.log.Warn("the watch of the guard's table ended; renewing it", "err", ch.Err)
				subscribe.Reset(0)
				verify(nftcap.Change{})
				continue
			}
			verify(drain(changes, ch))
		case <-links:
			settle.Reset(h.settle)
		case <-settle.C:
			h.rederive()
		case <-tick.C:
			verify(nftcap.Change{})
		case <-retry.C:
			verify(nftcap.Change{})
		}
	}
}

// drain takes the changes already waiting and returns the last that names its author.
func drain(changes <-chan nftcap.Change, last nftcap.Change) nftcap.Change {
	for {
		select {
		case ch, ok := <-changes:
			if !ok || ch.Err != nil {
				return last
			}
			if ch.PID != 0 {
				last = ch
			}
		default:
			return last
		}
	}
}

func newStoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// verify checks the table and restores it when it is damaged; it returns how long to wait
// before trying again when the restore failed (0: nothing to retry).
func (h *healer) verify(by nftcap.Change) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cfg == nil {
		return 0
	}
	damage, err := h.ops.check(h.spec)
	if err != nil {
		h.log.Warn("the guard's table could not be checked", "table", h.spec.Table, "err", err)
		return 0
	}
	if damage == "" {
		h.backoff = 0
		return 0
	}
	start := h.ops.now()
	attrs := []any{"table", "inet " + h.spec.Table, "damage", damage}
	if by.PID != 0 {
		attrs = append(attrs, "by", fmt.Sprintf("%s (pid %d)", by.Comm, by.PID))
	}
	if err := h.ops.install(h.spec); err != nil {
		h.backoff = min(max(2*h.backoff, minBackoff), maxBackoff)
		h.log.Error("the guard's table was changed by someone else and could NOT be restored: VM traffic may leave unguarded", append(attrs, "err", err, "retry_in", h.backoff)...)
		return h.backoff
	}
	h.backoff = 0
	now := h.ops.now()
	h.stats.Restores++
	h.stats.LastRestore = now
	h.stats.LastDamage = damage
	if by.PID != 0 {
		h.stats.LastDamage += fmt.Sprintf(" (by %s, pid %d)", by.Comm, by.PID)
	}
	h.log.Error("the guard's table was changed by someone else; restored", append(attrs, "took", now.Sub(start).Round(time.Microsecond), "restores", h.stats.Restores)...)
	return 0
}

// rederive reads the interfaces again and installs the table anew when the caged
// interfaces changed.
func (h *healer) rederive() {
	h.mu.Lock()
	if h.cfg == nil {
		h.mu.Unlock()
		return
	}
	s := h.ops.spec(h.cfg)
	if slices.Equal(s.VMInterfaces, h.spec.VMInterfaces) {
		h.mu.Unlock()
		return
	}
	if err := h.ops.install(s); err != nil {
		h.mu.Unlock()
		h.log.Error("the VM-facing interfaces changed, but the guard could not be updated: the new ones are caged by their addresses only", "interfaces", strings.Join(s.VMInterfaces, ","), "err", err)
		return
	}
	old, file := h.spec.VMInterfaces, h.cfg.File
	h.spec = s
	h.mu.Unlock()
	h.log.Info("the VM-facing interfaces changed; the guard cages them whole", "interfaces", strings.Join(s.VMInterfaces, ","), "before", strings.Join(old, ","))
	if err := h.ops.save(file, s); err != nil {
		h.log.Warn("the last good guard was not saved", "err", err)
	}
}
