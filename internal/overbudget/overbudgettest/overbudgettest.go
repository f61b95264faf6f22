// Package overbudgettest is a fake overbudget.Asker for tests.
package overbudgettest

import (
	"context"
	"sync"

	"github.com/agentcage/router/internal/overbudget"
)

// Asker answers every question with Allow (or, when Answer is set, what Answer returns),
// and keeps the questions it was asked. It is safe for concurrent use.
type Asker struct {
	Allow  bool
	Answer func(ctx context.Context, q overbudget.Question) bool // nil: Allow

	mu        sync.Mutex
	questions []overbudget.Question
}

// AskBudget records q and answers it.
func (a *Asker) AskBudget(ctx context.Context, q overbudget.Question) bool {
	a.mu.Lock()
	a.questions = append(a.questions, q)
	a.mu.Unlock()
	if a.Answer != nil {
		return a.Answer(ctx, q)
	}
	return a.Allow
}

// Questions returns the questions asked so far, in order.
func (a *Asker) Questions() []overbudget.Question {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]overbudget.Question(nil), a.questions...)
}
