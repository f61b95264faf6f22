// Package overbudget decides what happens to a guest past one of its budgets ([budget]
// over): the one decision both budgets (the DNS names', the bytes up's) call, so that
// "refuse", "alert" and "ask" mean the same on both.
package overbudget

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Mode is [budget] over.
type Mode uint8

const (
	Refuse Mode = iota // refused (a name; a flow cut, new flows)
	Alert              // let through, reported
	Ask                // the host's owner is asked; refused unless allowed in time
)

// The budgets' names, as [budget] spells them: Question.Budget.
const (
	Names   = "names_per_domain"
	BytesUp = "bytes_up_per_domain"
)

// Question is what the host's owner is asked when a guest passes a budget.
type Question struct {
	Budget string // Names or BytesUp
	Guest  string // the guest's budget key: its VM network, else its address
	Domain string // the registrable domain (or address) counted under
	Used   int64  // the count with the one that passed (names, bytes)
	Limit  int64
	Window time.Duration
}

// String is the question as the prompt shows it.
func (q Question) String() string {
	return fmt.Sprintf("budget %s: guest %s is past %d under %s in %v (now %d); allow lets it on for the rest of the window",
		q.Budget, q.Guest, q.Limit, q.Domain, q.Window, q.Used)
}

// Asker asks the host's owner q, within ctx, and reports whether they allowed the guest
// on; false on a deny, no answer in time, or nobody to ask.
type Asker interface {
	AskBudget(ctx context.Context, q Question) bool
}

// Decide reports whether a guest past a budget goes on (pass): never with Refuse, always
// with Alert, and with Ask when asker (nil: nobody to ask, refused) allows q within ctx.
// With Ask it blocks until the answer, or ctx's end.
func Decide(ctx context.Context, mode Mode, asker Asker, q Question) (pass bool) {
	switch mode {
	case Alert:
		return true
	case Ask:
		return asker != nil && asker.AskBudget(ctx, q)
	default:
		return false
	}
}

// Words are a budget's words for what each Mode does past it, indexed by Mode.
type Words [Ask + 1]string

// Report logs at Warn that the guest of q passed its budget: msg, then what mode does past
// it (words[mode]). The budget reports a guest and domain once a window.
func Report(log *slog.Logger, msg string, mode Mode, words Words, q Question) {
	log.Warn(msg+words[mode], "guest", q.Guest, "domain", q.Domain, "budget", q.Limit, "window", q.Window)
}
