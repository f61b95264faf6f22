package dns

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A guest is the unit of fairness here as in the router: a client inside one of
// Config.Guests (the VM networks) is budgeted as that network, whatever address of it it
// asks from, so that a VM that owns its network gets one share of the fake-IP pool, of the
// queries waiting for an upstream and of the upstream's connections, not one per address.

// keyOf is the budget key of src: its guest network when it is in one, else Source.key.
func (s *Server) keyOf(src Source) sourceKey {
	k := src.key()
	if a := src.Addr.Unmap().WithZone(""); a.IsValid() {
		for _, n := range s.guests {
			if n.Contains(a) {
				k.prefix = n.Masked()
				break
			}
		}
	}
	return k
}

// routerKey is the budget key of the router's own lookups (ResolveViaProxy).
var routerKey = sourceKey{app: "(router)"}

// Shares of the upstream's connections (maxUpstreamConns) between guests: a guest holds at
// most (maxUpstreamConns-upstreamHeadroom)/n of them for n guests holding or waiting (never
// fewer than upstreamMinShare), so upstreamHeadroom are left for a guest not yet seen; a
// query waits at most upstreamWait for its guest's turn, then gets SERVFAIL (counted as a
// limit refusal).
const (
	upstreamHeadroom = 4
	upstreamMinShare = 2
	upstreamWait     = time.Second
)

// fairGate is a counting semaphore of capacity slots shared fairly between keys, as above.
// mu guards the fields below it; changed is closed (and made anew) whenever a slot is given
// back or a key stops waiting, to wake the waiters. Safe for concurrent use.
type fairGate struct {
	capacity, headroom, minShare int

	mu      sync.Mutex
	used    int
	held    map[sourceKey]int
	waiting map[sourceKey]int
	changed chan struct{}
}

func newFairGate(capacity, headroom, minShare int) *fairGate {
	return &fairGate{capacity: capacity, headroom: min(headroom, capacity-1), minShare: min(minShare, capacity),
		held: map[sourceKey]int{}, waiting: map[sourceKey]int{}, changed: make(chan struct{})}
}

// grantableLocked reports whether k may take a slot now; mu is held.
func (g *fairGate) grantableLocked(k sourceKey) bool {
	if g.used >= g.capacity {
		return false
	}
	n := len(g.held)
	for w := range g.waiting {
		if g.held[w] == 0 {
			n++
		}
	}
	if g.held[k] == 0 && g.waiting[k] == 0 {
		n++
	}
	return g.held[k] < max(g.minShare, (g.capacity-g.headroom)/n)
}

// acquire takes a slot for k, waiting until one is within k's share or ctx ends (then it
// returns ctx's error). A nil return must be followed by one release.
func (g *fairGate) acquire(ctx context.Context, k sourceKey) error {
	g.mu.Lock()
	waited := false
	for !g.grantableLocked(k) {
		if !waited {
			g.waiting[k]++
			waited = true
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			g.mu.Lock()
			g.unwaitLocked(k)
			g.mu.Unlock()
			return fmt.Errorf("wait for an upstream connection: %w", ctx.Err())
		}
		g.mu.Lock()
	}
	if waited {
		g.unwaitLocked(k)
	}
	g.held[k]++
	g.used++
	g.mu.Unlock()
	return nil
}

func (g *fairGate) unwaitLocked(k sourceKey) {
	if g.waiting[k]--; g.waiting[k] <= 0 {
		delete(g.waiting, k)
	}
	g.wakeLocked() // one fewer guest counted: the shares grew
}

func (g *fairGate) wakeLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// release gives back a slot of k.
func (g *fairGate) release(k sourceKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[k]--; g.held[k] <= 0 {
		delete(g.held, k)
	}
	g.used--
	g.wakeLocked()
}

// failureCache remembers the relayed queries the resolver did not answer in time for
// failureTTL: the same question asked again meanwhile fails at once, holding no upstream
// connection, as a resolver's answer cache keeps a SERVFAIL (RFC 2308 §7.1 allows 5 minutes;
// a few seconds are enough to stop a retry storm). At most maxFailures are kept; when full,
// the oldest goes. mu guards m and order.
type failureCache struct {
	now func() time.Time

	mu    sync.Mutex
	m     map[cacheKey]failure
	order []cacheKey // oldest first; may hold keys already gone from m
}

type failure struct {
	until time.Time
	err   error
}

const (
	failureTTL  = 5 * time.Second
	maxFailures = 4096
)

func newFailureCache(now func() time.Time) *failureCache {
	return &failureCache{now: now, m: map[cacheKey]failure{}}
}

// get returns the failure remembered for k, or nil.
func (c *failureCache) get(k cacheKey) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.m[k]
	if !ok {
		return nil
	}
	if !c.now().Before(f.until) {
		delete(c.m, k)
		return nil
	}
	return fmt.Errorf("failed %v ago, not asked again yet: %w", failureTTL-f.until.Sub(c.now()), f.err)
}

// put remembers that k failed with err.
func (c *failureCache) put(k cacheKey, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.m) >= maxFailures && len(c.order) > 0 {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	if len(c.order) >= 2*maxFailures { // keys long gone: compact
		live := c.order[:0]
		for _, o := range c.order {
			if _, ok := c.m[o]; ok {
				live = append(live, o)
			}
		}
		c.order = live
	}
	c.m[k] = failure{until: c.now().Add(failureTTL), err: err}
	c.order = append(c.order, k)
}
