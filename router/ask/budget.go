package ask

import (
	"context"
	"time"

	"github.com/agentcage/router/internal/overbudget"
)

// Budgets asks a Desk the questions of the budgets with [budget] over = "ask"
// (overbudget.Asker): one prompt per guest, budget and domain, however many queries or
// flows wait on it. A nil *Budgets asks nobody (every question is refused).
type Budgets struct {
	Desk *Desk
	// Timeout is how long a question waits for its answer ([policy] ask_timeout), read at
	// each question; a shorter ctx (a DNS query's) ends it first. 0: nobody answers
	// ([policy] unattended), the question is refused at once.
	Timeout func() time.Duration
}

// AskBudget holds the guest until q is answered and reports whether it was approved
// (Once, Run or Always); false on Deny, no answer within the timeout or ctx, or a guest
// past the Desk's bounds.
func (b *Budgets) AskBudget(ctx context.Context, q overbudget.Question) bool {
	if b == nil || b.Desk == nil {
		return false
	}
	timeout := b.Timeout()
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return false
	}
	a, _ := b.Desk.Hold(ctx, Key{Host: q.Domain, Budget: q.Budget, Guest: q.Guest}, q.Guest, q.String(), "", timeout)
	return a.Approves()
}

var _ overbudget.Asker = (*Budgets)(nil)
