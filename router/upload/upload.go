// Package upload counts the bytes each guest sends to each registrable domain in a window,
// against a budget ([budget] bytes_up_per_domain): the upload half of the budgets that
// bound what a guest can carry out through the paths the rules allow.
//
// A Budget is shared by every flow; each relayed flow counts through a Flow of its own,
// made for its guest and domain when it starts. The relay calls Flow.Add once per chunk it
// moves up (one read or one splice), never per byte, and ends the flow when Add says so.
// A nil *Budget (no budget configured) makes nil Flows, and the relay does not count at all.
//
// A guest's window starts with its first counted byte and lasts Window; at its end every
// count of the guest starts again. What happens past the budget for one domain is
// overbudget.Decide's: with Over Refuse, Add reports the cut of every flow of the guest to
// the domain that sends one more chunk, and Refuses refuses its new flows there, until the
// window ends; with Alert the bytes pass and are counted; with Ask, Add holds the chunk
// (and so the flow) while the host's owner is asked (Limits.Asker): allowed, the guest's
// bytes to the domain pass for the rest of the window; denied or unanswered, the flow is
// cut and the rest of the window is as with Refuse. Either way the first passing of a
// window is logged once.
//
// Memory is bounded whatever a guest does: at most maxGuests guests are counted (a new one
// past that takes the oldest window's place), and at most maxDomains domains a guest and
// window; the bytes to further domains are counted together under Overflow, one budget for
// all of them, so a guest cannot buy room by spreading its bytes over many domains.
//
// A Budget is safe for concurrent use; mu guards the counts.
package upload

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentcage/router/internal/overbudget"
	"github.com/agentcage/router/internal/window"
)

// Over is what happens past a budget (overbudget.Decide decides).
type Over = overbudget.Mode

const (
	Refuse = overbudget.Refuse // the flows that send more are cut, new flows refused, until the window ends
	Alert  = overbudget.Alert  // the bytes pass, counted; logged once per guest, domain and window
	Ask    = overbudget.Ask    // the flow that passes is held while Asker is asked
)

// Limits are a Budget's settings; the zero PerDomain limits nothing.
type Limits struct {
	PerDomain int64         // bytes one guest may send to one domain in a Window
	Window    time.Duration // a guest's counts start again when its window ends
	Over      Over
	Asker     overbudget.Asker // for Ask; nil: nobody to ask, refused
}

// Overflow is the domain the bytes past maxDomains domains in one window are counted under.
const Overflow = "(other domains)"

// Bounds of what a Budget keeps.
const (
	maxGuests  = 1024
	maxDomains = 4096
)

// Budget counts bytes up per guest and domain.
type Budget struct {
	cfg Limits
	now func() time.Time
	log *slog.Logger

	mu     sync.Mutex
	guests *window.Guests[string, domain]
}

type domain struct {
	used     int64
	reported bool // the passing was logged this window
	allowed  bool // Ask: the host's owner allowed the guest on this window
	denied   bool // Ask: the host's owner denied it (or did not answer) this window
}

// New returns the budget for cfg, logging to log (nil: nowhere) and reading the time from
// now (nil: time.Now); nil when cfg.PerDomain is 0 (nothing is counted).
func New(cfg Limits, now func() time.Time, log *slog.Logger) *Budget {
	if cfg.PerDomain <= 0 || cfg.Window <= 0 {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Budget{cfg: cfg, now: now, log: log, guests: window.New[string, domain](cfg.Window, maxGuests, nil)}
}

// Limits returns b's settings (the zero Limits for a nil b).
func (b *Budget) Limits() Limits {
	if b == nil {
		return Limits{}
	}
	return b.cfg
}

// Flow is one flow's counter: its guest and domain. A nil *Flow counts nothing.
type Flow struct {
	b             *Budget
	guest, domain string
	// ctx bounds the flow's question (Ask; nil otherwise): Stop ends it.
	ctx    context.Context
	cancel context.CancelFunc
}

// Flow returns the counter of a flow of guest to domain (a registrable domain, or the
// address of a flow without a name); nil when b is nil.
func (b *Budget) Flow(guest, domain string) *Flow {
	if b == nil {
		return nil
	}
	f := &Flow{b: b, guest: guest, domain: strings.ToLower(domain)}
	if b.cfg.Over == Ask {
		f.ctx, f.cancel = context.WithCancel(context.Background())
	}
	return f
}

// Stop ends the flow's wait for an answer, now or later (the flow is being ended anyway):
// Add then reports the cut, and nothing is remembered of the question for the guest. Safe
// from any goroutine; nothing for a nil f or a budget that does not ask.
func (f *Flow) Stop() {
	if f != nil && f.cancel != nil {
		f.cancel()
	}
}

// Add counts n bytes sent up by the flow and reports whether the flow is to be cut: the
// guest is past its budget for the domain (this chunk included) and overbudget.Decide does
// not let it on. The chunk that passes the budget is counted, and it is cut with the flow
// (the relay has not passed it on). With Ask (Holds), Add blocks while the host's owner is
// asked: the relay calls it only where that holds this flow alone.
func (f *Flow) Add(n int64) (cut bool) {
	if f == nil {
		return false
	}
	b := f.b
	now := b.now()
	b.mu.Lock()
	d := b.entry(f.guest, f.domain, now)
	d.used += n
	if d.used <= b.cfg.PerDomain || d.allowed {
		b.mu.Unlock()
		return false
	}
	q := overbudget.Question{Budget: overbudget.BytesUp, Guest: f.guest, Domain: f.domain, Used: d.used,
		Limit: b.cfg.PerDomain, Window: b.cfg.Window}
	if !d.reported {
		d.reported = true
		overbudget.Report(b.log, "budget: a guest sent more than its budget of bytes to one domain: ", b.cfg.Over,
			overbudget.Words{Refuse: "its flows there that send more are cut and new ones refused until the window ends",
				Alert: "its bytes pass (alert only)", Ask: "the host's owner is asked"}, q)
	}
	if d.denied {
		b.mu.Unlock()
		return true
	}
	b.mu.Unlock()
	ctx := f.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	pass := overbudget.Decide(ctx, b.cfg.Over, b.cfg.Asker, q)
	if b.cfg.Over == Ask && ctx.Err() == nil {
		b.mu.Lock()
		d.allowed, d.denied = pass, !pass // d is its window's: a window that ended meanwhile is dropped
		b.mu.Unlock()
	}
	return !pass
}

// Holds reports whether Add may block (Ask): the flow is to be relayed where its waiting
// holds no other flow. False for a nil f.
func (f *Flow) Holds() bool { return f != nil && f.b.cfg.Over == Ask }

// Refuses reports whether a new flow of guest to domain is refused: the guest is past its
// budget for the domain in its window, and Over is Refuse (or Ask, and the host's owner
// did not allow it on). Always false for a nil b.
func (b *Budget) Refuses(guest, domain string) bool {
	if b == nil || b.cfg.Over == Alert {
		return false
	}
	domain = strings.ToLower(domain)
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.guests.Current(guest, now)
	if g == nil {
		return false
	}
	d := g.Domains[domain]
	if d == nil && len(g.Domains) >= maxDomains {
		d = g.Domains[Overflow]
	}
	return d != nil && d.used > b.cfg.PerDomain && (b.cfg.Over == Refuse || d.denied)
}

// entry returns the count of guest and domain in the guest's current window, starting a
// window when the last one ended; b.mu is held.
func (b *Budget) entry(guestKey, name string, now time.Time) *domain {
	g := b.guests.Span(guestKey, now)
	d := g.Domains[name]
	if d == nil {
		if len(g.Domains) >= maxDomains {
			name = Overflow
			if d = g.Domains[name]; d != nil {
				return d
			}
		}
		d = &domain{}
		g.Domains[name] = d
	}
	return d
}

// Use is one guest's count of bytes up (Used) for one domain in its current window.
type Use = window.Use

// Uses returns the counts of the windows still running, by guest then by domain: the max
// largest (every one when max <= 0); nil for a nil b.
func (b *Budget) Uses(max int) []Use {
	if b == nil {
		return nil
	}
	return window.List(&b.mu, b.guests, b.now(), max, b.cfg.PerDomain,
		func(gk string) string { return gk }, func(d *domain) int64 { return d.used })
}
