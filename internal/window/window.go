// Package window keeps the windowed counts of the budgets per guest and registrable domain
// (the DNS names' and the bytes up's): each guest's window starts with its first count and
// lasts a Window, at its end every count of the guest starts again, and at most a bound of
// guests are kept (a new one past it takes the oldest window's place). What is counted per
// domain, and how many domains a window keeps, is the budget's.
//
// A Guests is not safe for concurrent use: the budget that holds it guards it with its own
// lock.
package window

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Span is one guest's current window: when it started and its counts by domain.
type Span[E any] struct {
	Start   time.Time
	Domains map[string]*E
}

// Guests holds the spans of at most max guests, keyed by K.
type Guests[K comparable, E any] struct {
	window time.Duration
	max    int
	onDrop func(*Span[E])
	spans  map[K]*Span[E]
}

// New returns the spans of windows of length window, keeping at most max guests; onDrop
// (nil: nothing) is called with every span dropped, ended or pushed out.
func New[K comparable, E any](window time.Duration, max int, onDrop func(*Span[E])) *Guests[K, E] {
	return &Guests[K, E]{window: window, max: max, onDrop: onDrop, spans: map[K]*Span[E]{}}
}

// Current returns k's window still running at now; nil when k has none.
func (g *Guests[K, E]) Current(k K, now time.Time) *Span[E] {
	s := g.spans[k]
	if s == nil || now.Sub(s.Start) >= g.window {
		return nil
	}
	return s
}

// Span returns k's window running at now, starting one (the ended one dropped, and the
// oldest guest's when max guests are kept) when it has none.
func (g *Guests[K, E]) Span(k K, now time.Time) *Span[E] {
	s := g.spans[k]
	if s != nil && now.Sub(s.Start) < g.window {
		return s
	}
	if s != nil {
		g.drop(k, s)
	}
	if len(g.spans) >= g.max {
		g.dropOldest()
	}
	s = &Span[E]{Start: now, Domains: map[string]*E{}}
	g.spans[k] = s
	return s
}

// Len is how many guests' spans are kept (ended ones not yet dropped among them).
func (g *Guests[K, E]) Len() int { return len(g.spans) }

// Each calls f with every count of the windows still running at now, in no order.
func (g *Guests[K, E]) Each(now time.Time, f func(k K, start time.Time, domain string, e *E)) {
	for k, s := range g.spans {
		if now.Sub(s.Start) >= g.window {
			continue
		}
		for d, e := range s.Domains {
			f(k, s.Start, d, e)
		}
	}
}

func (g *Guests[K, E]) drop(k K, s *Span[E]) {
	if g.onDrop != nil {
		g.onDrop(s)
	}
	delete(g.spans, k)
}

func (g *Guests[K, E]) dropOldest() {
	var oldK K
	var old *Span[E]
	for k, s := range g.spans {
		if old == nil || s.Start.Before(old.Start) {
			oldK, old = k, s
		}
	}
	if old != nil {
		g.drop(oldK, old)
	}
}

// Use is one guest's count for one registrable domain in its current window of a budget:
// what the budget lists for status, watch, the console and the metrics.
type Use struct {
	Guest, Domain string
	Used, Limit   int64
	Start         time.Time // the window's
	Window        time.Duration
	Over          bool // Used is past Limit
}

// List returns the counts of g's windows still running at now as uses of a budget of limit a
// domain: the max largest by Used (every one when max <= 0), ordered by guest, then domain.
// guest names a key, used reads a domain's count. It holds mu, the lock that guards g, while
// it reads g, not while it sorts.
func List[K comparable, E any](mu sync.Locker, g *Guests[K, E], now time.Time, max int, limit int64,
	guest func(K) string, used func(*E) int64) []Use {
	mu.Lock()
	var out []Use
	g.Each(now, func(k K, start time.Time, d string, e *E) {
		n := used(e)
		out = append(out, Use{Guest: guest(k), Domain: d, Used: n, Limit: limit, Start: start, Window: g.window, Over: n > limit})
	})
	mu.Unlock()
	return Largest(out, max)
}

// Largest keeps the max largest of uses by Used (every one when max <= 0) and returns them
// ordered by guest, then domain.
func Largest(uses []Use, max int) []Use {
	if max > 0 && len(uses) > max {
		slices.SortFunc(uses, func(x, y Use) int { return cmp.Compare(y.Used, x.Used) })
		uses = uses[:max]
	}
	slices.SortFunc(uses, func(x, y Use) int {
		return cmp.Or(strings.Compare(x.Guest, y.Guest), strings.Compare(x.Domain, y.Domain))
	})
	return uses
}
