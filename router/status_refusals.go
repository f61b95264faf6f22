package router

import (
	"log/slog"
	"time"

	"github.com/agentcage/router/internal/tally"
)

// refusals keeps the log readable under a flood of refused or failed flows (package
// tally): the first perReasonLogged flows of each reason in an interval are logged one by
// one (as their callers would log them), the rest only counted, and one WARN summary line
// per interval that had any gives the counts by reason, the number of sources and the
// source with the most. Safe for concurrent use.
type refusals struct{ s *tally.Summary }

const (
	// defaultSummaryEvery is the interval of the refusal summary line.
	defaultSummaryEvery = time.Minute
	// perReasonLogged refusals of each reason are logged one by one per interval.
	perReasonLogged = 5
)

func newRefusals(log *slog.Logger, every time.Duration) *refusals {
	if every <= 0 {
		every = defaultSummaryEvery
	}
	return &refusals{s: tally.New(log, every, tally.Options{Message: "refused or failed flows (summary)", Unit: "flows", PerKind: perReasonLogged})}
}

// note counts one refusal of reason from source who and reports whether the caller should
// log it one by one (the first perReasonLogged of its reason in this interval).
func (t *refusals) note(reason, who string) bool { return t.s.Add(reason, who, nil) }

// flush logs and resets the pending counts, if any.
func (t *refusals) flush() { t.s.Flush() }
