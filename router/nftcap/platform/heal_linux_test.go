package platform

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/syncbuf"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/nftcap"
)

// fakeKernel is the healer's world in memory: one table that tests damage, a change feed,
// interface events and the interfaces a config derives.
type fakeKernel struct {
	mu         sync.Mutex
	installed  *nftcap.Spec // nil: no table
	damaged    bool
	installs   int
	failNext   int      // installs to refuse
	interfaces []string // what spec derives
	watchErr   error
	watches    int
	checks     int // the tables checked
	specs      int // the specs derived

	changes chan nftcap.Change
	links   chan struct{}
}

func newFakeKernel() *fakeKernel {
	return &fakeKernel{changes: make(chan nftcap.Change, 16), links: make(chan struct{}, 1)}
}

func (k *fakeKernel) ops() tableOps {
	return tableOps{
		spec: func(cfg *conf.Config) nftcap.Spec {
			k.mu.Lock()
			defer k.mu.Unlock()
			k.specs++
			return nftcap.Spec{Table: cfg.Capture.Table, VMInterfaces: slices.Clone(k.interfaces)}
		},
		install: func(s nftcap.Spec) error {
			k.mu.Lock()
			defer k.mu.Unlock()
			if k.failNext > 0 {
				k.failNext--
				return errors.New("netlink refused")
			}
			k.installed, k.damaged = &s, false
			k.installs++
			return nil
		},
		check: func(s nftcap.Spec) (string, error) {
			k.mu.Lock()
			defer k.mu.Unlock()
			k.checks++
			switch {
			case k.installed == nil:
				return "table inet " + s.Table + " is missing", nil
			case k.damaged:
				return "chain input has 0 rules, want 12", nil
			}
			return "", nil
		},
		watch: func(string) (<-chan nftcap.Change, func(), error) {
			k.mu.Lock()
			defer k.mu.Unlock()
			k.watches++
			if k.watchErr != nil {
				return nil, nil, k.watchErr
			}
			return k.changes, func() {}, nil
		},
		links: func() (<-chan struct{}, func(), error) { return k.links, func() {}, nil },
		save:  func(string, nftcap.Spec) error { return nil },
		now:   time.Now,
	}
}

// remove takes the table away, as `nft flush ruleset` does, and reports it.
func (k *fakeKernel) remove() {
	k.mu.Lock()
	k.installed = nil
	k.mu.Unlock()
	k.changes <- nftcap.Change{PID: 4242, Comm: "nft"}
}

func (k *fakeKernel) state() (installed bool, installs int, ifaces []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.installed != nil {
		ifaces = k.installed.VMInterfaces
	}
	return k.installed != nil && !k.damaged, k.installs, ifaces
}

// counted returns the fake's tables checked and specs derived so far.
func (k *fakeKernel) counted() (checks, specs int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.checks, k.specs
}

// handled waits until cond says the healer began to handle an event (it checked the table,
// or derived a spec), then until it is done with it: it checks and restores, derives and
// installs, under its lock, which status takes.
func handled(t *testing.T, h *healer, what string, cond func() bool) {
	t.Helper()
	wait.For(t, what, 5*time.Second, cond)
	h.status()
}

func newTestHealer(k *fakeKernel) (*healer, *syncbuf.Buffer) {
	var buf syncbuf.Buffer
	h := newHealer(slog.New(slog.NewTextHandler(&buf, nil)), k.ops())
	h.every = time.Hour // the tests drive every check
	h.settle = time.Millisecond
	return h, &buf
}

// installedHealer is newTestHealer's healer with testCfg's table installed, closed when the
// test ends.
func installedHealer(t *testing.T, k *fakeKernel) (*healer, *syncbuf.Buffer) {
	t.Helper()
	h, log := newTestHealer(k)
	t.Cleanup(h.close)
	if err := h.install(testCfg()); err != nil {
		t.Fatal(err)
	}
	return h, log
}

func testCfg() *conf.Config {
	return &conf.Config{File: "router.toml", Capture: conf.Capture{Table: "router"}}
}

// watching waits until the healer subscribed n times.
func (k *fakeKernel) watching(t *testing.T, n int) {
	t.Helper()
	wait.For(t, "subscription", time.Second, func() bool { k.mu.Lock(); defer k.mu.Unlock(); return k.watches >= n })
}

func TestHealerRestoresARemovedTable(t *testing.T) {
	k := newFakeKernel()
	h, log := installedHealer(t, k)
	k.watching(t, 1)
	k.remove()
	wait.For(t, "restore", time.Second, func() bool { ok, n, _ := k.state(); return ok && n == 2 })
	wait.For(t, "status", time.Second, func() bool { return h.status().Restores == 1 })
	st := h.status()
	if !strings.Contains(st.LastDamage, "is missing") || !strings.Contains(st.LastDamage, "by nft, pid 4242") || st.LastRestore.IsZero() {
		t.Errorf("status = %+v", st)
	}
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "restored") {
		t.Errorf("log lacks the error line:\n%s", log)
	}

	// A change that leaves the table whole (the router's own install, another table) is
	// checked and left alone.
	checks, _ := k.counted()
	k.changes <- nftcap.Change{PID: 1, Comm: "router"}
	handled(t, h, "the change checked", func() bool { c, _ := k.counted(); return c > checks })
	if _, n, _ := k.state(); n != 2 {
		t.Errorf("installs = %d after a harmless change, want 2", n)
	}
}

func TestHealerRetriesAFailedRestore(t *testing.T) {
	k := newFakeKernel()
	_, log := installedHealer(t, k)
	k.watching(t, 1)
	k.mu.Lock()
	k.failNext = 2
	k.mu.Unlock()
	k.remove()
	wait.For(t, "restore after two refusals", 2*time.Second, func() bool { ok, _, _ := k.state(); return ok })
	if n := strings.Count(log.String(), "could NOT be restored"); n != 2 {
		t.Errorf("%d failed restores logged, want 2:\n%s", n, log)
	}
}

func TestHealerEndedSubscription(t *testing.T) {
	k := newFakeKernel()
	installedHealer(t, k)
	k.watching(t, 1)
	// Events were lost while the table was damaged: the broken subscription is renewed and
	// the table checked.
	k.mu.Lock()
	k.damaged = true
	k.mu.Unlock()
	k.changes <- nftcap.Change{Err: errors.New("no buffer space")}
	wait.For(t, "restore", time.Second, func() bool { ok, _, _ := k.state(); return ok })
	k.watching(t, 2)
}

func TestHealerWithoutSubscriptionStillChecks(t *testing.T) {
	k := newFakeKernel()
	k.watchErr = errors.New("netlink: permission denied")
	h, log := newTestHealer(k)
	h.every = 10 * time.Millisecond
	defer h.close()
	if err := h.install(testCfg()); err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	k.installed = nil
	k.mu.Unlock()
	wait.For(t, "periodic restore", time.Second, func() bool { ok, _, _ := k.state(); return ok })
	if !strings.Contains(log.String(), "is not watched") {
		t.Errorf("log lacks the failed subscription:\n%s", log)
	}
}

func TestHealerCagesNewInterfaces(t *testing.T) {
	k := newFakeKernel()
	k.interfaces = []string{"vmnet"}
	h, _ := installedHealer(t, k)
	// An address event that changes nothing derived: no install.
	_, specs := k.counted()
	k.links <- struct{}{}
	handled(t, h, "the spec derived anew", func() bool { _, s := k.counted(); return s > specs })
	if _, n, _ := k.state(); n != 1 {
		t.Fatalf("installs = %d after an event that changed nothing, want 1", n)
	}
	k.mu.Lock()
	k.interfaces = []string{"vmnet", "virbr1"}
	k.mu.Unlock()
	k.links <- struct{}{}
	wait.For(t, "new interface caged", time.Second, func() bool {
		_, _, ifs := k.state()
		return slices.Equal(ifs, []string{"vmnet", "virbr1"})
	})
	// A later restore restores the new interfaces too.
	k.remove()
	wait.For(t, "restore", time.Second, func() bool { ok, n, _ := k.state(); return ok && n == 3 })
	if _, _, ifs := k.state(); !slices.Equal(ifs, []string{"vmnet", "virbr1"}) {
		t.Errorf("restored interfaces = %v", ifs)
	}
}

func TestHealerClose(t *testing.T) {
	// In a bubble: synctest.Wait lets a loop that close left running (the bug) take the
	// change and restore the table before the check.
	synctest.Test(t, func(t *testing.T) {
		k := newFakeKernel()
		h, _ := newTestHealer(k)
		h.close() // before install: nothing to stop
		if err := h.install(testCfg()); err != nil {
			t.Fatal(err)
		}
		h.close()
		h.close()
		k.remove()
		synctest.Wait()
		if ok, _, _ := k.state(); ok {
			t.Error("the table was restored after close: a stopped daemon must leave it to the admin")
		}
	})
}
