package conf

import "time"

// Budget is [budget]: how much one guest may do with one registrable domain in a window,
// against exfiltration through the paths the rules allow, without decrypting anything. The
// router is the guests' resolver, so a DNS tunnel (a thousand labels under one domain) shows
// as many distinct names under one registrable domain: past NamesPerDomain in a Window the
// guest's further new names under it are refused (or, with Over = "alert", answered and
// reported; with Over = "ask", answered when the host's owner allows it, as an ask rule's
// flow is). Past BytesUpPerDomain in a Window, the guest's flows to the domain that send
// more are cut and its new flows there refused (or, with Over = "alert", let through and
// reported). The zero Budget (no [budget] table) limits nothing.
type Budget struct {
	// Window is the span a budget counts over; a guest's counts start again when it ends.
	Window time.Duration
	// NamesPerDomain is how many distinct names one guest may look up under one registrable
	// domain (example.com, example.co.uk) in a Window; 0 for no limit.
	NamesPerDomain int
	// BytesUpPerDomain is how many bytes one guest may send up to one registrable domain
	// (the name its flows were decided by; a flow without one counts under its address) in
	// a Window, its relayed TCP flows together; 0 for no limit.
	BytesUpPerDomain int64
	// Over is what happens past a budget: BudgetRefuse, BudgetAlert or BudgetAsk.
	Over string
}

// Budget outcomes, [budget] over.
const (
	BudgetRefuse = "refuse" // refused (a name; a flow cut, new flows) and counted (reason "budget"), logged once per guest, domain and window
	BudgetAlert  = "alert"  // let through, logged once per guest, domain and window
	BudgetAsk    = "ask"    // the host's owner is asked (as for an ask rule); refused unless allowed
)

// Defaults and bounds of [budget].
const (
	DefaultBudgetWindow = time.Minute
	MaxBudgetWindow     = time.Hour
)

var budgetKeys = []string{"window", "names_per_domain", "bytes_up_per_domain", "over"}

func (d *decoder) budget(c *Config, v any) {
	a, m, ok := d.section("budget", v, budgetKeys)
	if !ok {
		return
	}
	c.Budget = Budget{Window: DefaultBudgetWindow, Over: BudgetRefuse}
	if v, ok := m["window"]; ok {
		if t, ok := d.durationIn(a.key("window"), v, time.Second, MaxBudgetWindow, ""); ok {
			c.Budget.Window = t
		}
	}
	if v, ok := m["names_per_domain"]; ok {
		n, isInt := v.(int64)
		switch {
		case !isInt:
			d.fail(a.key("names_per_domain"), "must be a number of names, not %s", typeName(v))
		case n < 1 || n > 1<<20:
			d.fail(a.key("names_per_domain"), "%d: between 1 and %d", n, 1<<20)
		default:
			c.Budget.NamesPerDomain = int(n)
		}
	}
	if v, ok := m["bytes_up_per_domain"]; ok {
		if n, ok := d.size(a.key("bytes_up_per_domain"), v); ok {
			c.Budget.BytesUpPerDomain = n
		}
	}
	if v, ok := m["over"]; ok {
		if s, ok := d.str(a.key("over"), v); ok {
			if s != BudgetRefuse && s != BudgetAlert && s != BudgetAsk {
				d.fail(a.key("over"), "%q is not refuse, alert or ask", s)
			}
			c.Budget.Over = s
		}
	}
}
