package dns

import (
	"context"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentcage/router/internal/overbudget"
	"github.com/agentcage/router/internal/window"
	"golang.org/x/net/publicsuffix"
)

// NameBudget is how many distinct names one guest (a source's budget key: its VM network,
// else its address) may look up under one registrable domain in a window; the zero
// NameBudget limits nothing. A DNS tunnel shows as many distinct labels under one domain;
// a guest's ordinary traffic asks a few names under each.
type NameBudget struct {
	PerDomain int           // distinct names under one registrable domain per window; 0: no limit
	Window    time.Duration // counts start again for a guest when its window ends
	// Over is what happens past the budget (overbudget.Decide): Refuse, Alert (answered
	// and reported), or Ask (Asker is asked while the query waits, within the DNS timeout;
	// allowed, the guest's new names under the domain are answered for the rest of the
	// window).
	Over  overbudget.Mode
	Asker overbudget.Asker // for Ask; nil: nobody to ask, refused
}

// Bounds of what a budget keeps: names counted beyond them are counted as new (a guest
// cannot buy itself room by asking many domains), so memory stays bounded whatever it asks.
const (
	maxBudgetGuests  = 1024    // guests with counts of their own (then the oldest window goes)
	maxBudgetDomains = 4096    // domains counted per guest and window
	maxBudgetNames   = 1 << 17 // names kept in all
)

// budget counts a window's distinct names per guest and registrable domain. It is safe for
// concurrent use.
type budget struct {
	cfg  NameBudget
	now  func() time.Time
	log  *slog.Logger
	seed maphash.Seed

	mu     sync.Mutex
	guests *window.Guests[sourceKey, domainCount]
	names  int // names kept in all guests' sets
}

type domainCount struct {
	names    map[uint64]struct{} // hashes of the names seen, at most PerDomain+1 kept
	n        int                 // distinct names counted (kept or not)
	reported bool                // the over-budget log line was written this window
	allowed  bool                // the host's owner allowed the guest on (Ask) this window
}

func newBudget(cfg NameBudget, now func() time.Time, log *slog.Logger) *budget {
	if cfg.PerDomain <= 0 {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &budget{cfg: cfg, now: now, log: log, seed: maphash.MakeSeed()}
	b.guests = window.New[sourceKey](cfg.Window, maxBudgetGuests, b.dropped)
	return b
}

// dropped forgets the names kept of a guest's window that ends; b.mu is held.
func (b *budget) dropped(s *window.Span[domainCount]) {
	for _, dc := range s.Domains {
		b.names -= len(dc.names)
	}
}

// Registrable is the domain a name's budgets are counted under, the names' here and the
// bytes' in the router: its registrable domain (eTLD+1), or the name itself when it has
// none (a bare TLD, a single label).
func Registrable(name string) string {
	if d, err := publicsuffix.EffectiveTLDPlusOne(name); err == nil {
		return d
	}
	return name
}

// over counts name for the guest k and reports whether the guest is past its budget for the
// name's registrable domain (returned, with the guest's count of names under it, for the
// answer's text and the question): what then happens is overbudget.Decide's. A name
// counted before in the window is never past, nor is any name once the guest was allowed
// on for the domain in the window (allow).
func (b *budget) over(k sourceKey, name string) (domain string, n int, past bool) {
	if b == nil || name == "" {
		return "", 0, false
	}
	domain = Registrable(strings.ToLower(name))
	now := b.now()
	h := maphash.String(b.seed, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.guests.Span(k, now)
	dc := g.Domains[domain]
	if dc == nil {
		if len(g.Domains) >= maxBudgetDomains {
			return domain, b.cfg.PerDomain + 1, true // too many domains in one window: nothing more is counted
		}
		dc = &domainCount{names: map[uint64]struct{}{}}
		g.Domains[domain] = dc
	}
	if _, seen := dc.names[h]; seen {
		return domain, dc.n, false
	}
	dc.n++
	if len(dc.names) <= b.cfg.PerDomain && b.names < maxBudgetNames {
		dc.names[h] = struct{}{}
		b.names++
	}
	if dc.n <= b.cfg.PerDomain || dc.allowed {
		return domain, dc.n, false
	}
	if !dc.reported {
		dc.reported = true
		overbudget.Report(b.log, "dns: a guest is past its budget of names under one domain: further new names ", b.cfg.Over,
			overbudget.Words{overbudget.Refuse: "refused", overbudget.Alert: "answered (alert only)", overbudget.Ask: "asked about"},
			b.question(k, domain, dc.n))
	}
	return domain, dc.n, true
}

// question is what the host's owner is asked about the guest k past its budget under domain
// with n names.
func (b *budget) question(k sourceKey, domain string, n int) overbudget.Question {
	return overbudget.Question{Budget: overbudget.Names, Guest: k.String(), Domain: domain, Used: int64(n),
		Limit: int64(b.cfg.PerDomain), Window: b.cfg.Window}
}

// decide is what happens to the guest k past its budget under domain (with n names):
// overbudget.Decide's answer, remembered for the rest of the window when the host's owner
// allowed the guest on (Ask), so the guest is not asked again about the domain in it.
func (b *budget) decide(ctx context.Context, k sourceKey, domain string, n int) (pass bool) {
	pass = overbudget.Decide(ctx, b.cfg.Over, b.cfg.Asker, b.question(k, domain, n))
	if pass && b.cfg.Over == overbudget.Ask {
		b.allow(k, domain)
	}
	return pass
}

// allow lets the guest k on under domain for the rest of its current window.
func (b *budget) allow(k sourceKey, domain string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.guests.Current(k, b.now()); g != nil {
		if dc := g.Domains[domain]; dc != nil {
			dc.allowed = true
		}
	}
}

// NameUse is one guest's count of distinct names (Used) under one registrable domain in the
// guest's current window of the name budget.
type NameUse = window.Use

// NameBudgets returns the name budget's counts in the windows still running, by guest then
// domain: the max largest (every one when max <= 0); nil without a budget.
func (s *Server) NameBudgets(max int) []NameUse { return s.budget.uses(max) }

func (b *budget) uses(max int) []NameUse {
	if b == nil {
		return nil
	}
	return window.List(&b.mu, b.guests, b.now(), max, int64(b.cfg.PerDomain),
		sourceKey.String, func(dc *domainCount) int64 { return int64(dc.n) })
}
