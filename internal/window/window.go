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

// List returns what use makes of every count of g's windows still running at now: the max
// largest by size (every one when max <= 0), ordered by guest, then domain (key's two
// strings). It holds mu, the lock that guards g, while it reads g, not while it sorts.
func List[K comparable, E, U any, N cmp.Ordered](mu sync.Locker, g *Guests[K, E], now time.Time, max int,
	use func(k K, start time.Time, domain string, e *E) U, size func(U) N, key func(U) (guest, domain string)) []U {
	mu.Lock()
	var out []U
	g.Each(now, func(k K, start time.Time, d string, e *E) { out = append(out, use(k, start, d, e)) })
	mu.Unlock()
	return Largest(out, max, size, key)
}

// Largest keeps the max largest of uses by size (every one when max <= 0) and returns them
// ordered by guest, then domain (key's two strings): the listing of a budget's counts.
func Largest[U any, N cmp.Ordered](uses []U, max int, size func(U) N, key func(U) (guest, domain string)) []U {
	if max > 0 && len(uses) > max {
		slices.SortFunc(uses, func(x, y U) int { return cmp.Compare(size(y), size(x)) })
		uses = uses[:max]
	}
	slices.SortFunc(uses, func(x, y U) int {
		xg, xd := key(x)
		yg, yd := key(y)
		return cmp.Or(strings.Compare(xg, yg), strings.Compare(xd, yd))
	})
	return uses
}
