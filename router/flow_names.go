package router

import (
	"context"
	"net/netip"
	"sync"
	"time"
)

// resolvedNames remembers what names resolve to through the proxy's resolver, for the
// policy's check of caged flows whose way out connects from this machine (a proxy on this
// host, or direct to a fake IP: policy.StepHostName). A guest opening many connections to
// one name costs one lookup: concurrent askers wait for the first, and the answer is kept
// for nameTTL (a failure for nameFailTTL). At most maxNames names are kept; when full,
// expired entries go first, then arbitrary ones.
//
// mu guards m; safe for concurrent use.
type resolvedNames struct {
	resolve func(ctx context.Context, name string) ([]netip.Addr, error)
	now     func() time.Time

	mu sync.Mutex
	m  map[string]*nameEntry
}

// nameEntry is one name's lookup: ready is closed once addrs and expires are set.
type nameEntry struct {
	ready   chan struct{}
	addrs   []netip.Addr // empty (not nil) after a failed lookup
	expires time.Time
}

const (
	nameTTL     = time.Minute
	nameFailTTL = 5 * time.Second
	maxNames    = 4096
)

func newResolvedNames(resolve func(ctx context.Context, name string) ([]netip.Addr, error)) *resolvedNames {
	return &resolvedNames{resolve: resolve, now: time.Now, m: map[string]*nameEntry{}}
}

// lookup returns name's addresses, never nil: empty when the lookup failed, found nothing,
// or ctx ended first (the caller then cannot tell that the name is harmless, and the policy
// refuses the flow).
func (c *resolvedNames) lookup(ctx context.Context, name string) []netip.Addr {
	c.mu.Lock()
	e, ok := c.m[name]
	if ok {
		select {
		case <-e.ready:
			if c.now().Before(e.expires) {
				c.mu.Unlock()
				return e.addrs
			}
			ok = false // expired: look again
		default:
		}
	}
	if !ok {
		c.evictLocked()
		e = &nameEntry{ready: make(chan struct{})}
		c.m[name] = e
		go c.fill(name, e)
	}
	c.mu.Unlock()
	select {
	case <-e.ready:
		return e.addrs
	case <-ctx.Done():
		return []netip.Addr{}
	}
}

// fill looks name up for e; it is bounded by its own timeout, so that one asker giving up
// does not cut the lookup short for the others.
func (c *resolvedNames) fill(name string, e *nameEntry) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := c.resolve(ctx, name)
	ttl := nameTTL
	if err != nil || len(addrs) == 0 {
		addrs, ttl = []netip.Addr{}, nameFailTTL
	}
	c.mu.Lock()
	e.addrs, e.expires = addrs, c.now().Add(ttl)
	close(e.ready)
	c.mu.Unlock()
}

// evictLocked makes room for one more name; c.mu is held.
func (c *resolvedNames) evictLocked() {
	if len(c.m) < maxNames {
		return
	}
	now := c.now()
	for n, e := range c.m {
		select {
		case <-e.ready:
			if !now.Before(e.expires) {
				delete(c.m, n)
			}
		default:
		}
	}
	for n, e := range c.m {
		if len(c.m) < maxNames {
			return
		}
		select {
		case <-e.ready:
			delete(c.m, n)
		default:
		}
	}
}
