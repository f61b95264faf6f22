package service

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// SummarizeFlows wraps next (the Windows event log's handler) so that the router's records
// of single flows ("flow open", and "flow" below Warn: one for every connection of every
// guest) do not each become a record: they are counted by action, and one Info record
// "flows" says how many there were per period, written with the first flow record after
// the period ends, or by the returned flush (call it when the log closes). Every other
// record, and a flow record at Warn or above (a relayed flow that failed), passes as it
// is. now is time.Now (a test's clock).
func SummarizeFlows(next slog.Handler, period time.Duration, now func() time.Time) (slog.Handler, func()) {
	s := &flowSummary{next: next, period: period, now: now, w: &window{counts: map[string]int{}}}
	return s, s.flush
}

// flowSummary is the handler SummarizeFlows returns; the handlers WithAttrs and WithGroup
// derive share its window.
type flowSummary struct {
	next   slog.Handler
	period time.Duration
	now    func() time.Time
	w      *window
}

// window is the period being counted; mu guards the fields below it.
type window struct {
	mu     sync.Mutex
	start  time.Time // zero: nothing counted yet
	opens  int
	counts map[string]int // flow ends by action
}

func (s *flowSummary) Enabled(ctx context.Context, l slog.Level) bool { return s.next.Enabled(ctx, l) }

func (s *flowSummary) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn || (r.Message != "flow" && r.Message != "flow open") {
		return s.next.Handle(ctx, r)
	}
	action := "other"
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "action" {
			action = a.Value.String()
			return false
		}
		return true
	})
	now := s.now()
	w := s.w
	w.mu.Lock()
	var due *slog.Record
	if !w.start.IsZero() && now.Sub(w.start) >= s.period {
		due = w.summaryLocked(now)
	}
	if w.start.IsZero() {
		w.start = now
	}
	if r.Message == "flow open" {
		w.opens++
	} else {
		w.counts[action]++
	}
	w.mu.Unlock()
	if due != nil {
		return s.next.Handle(ctx, *due)
	}
	return nil
}

// summaryLocked makes the summary of the window that ends at now and empties it; nil when
// it counted nothing. w.mu is held.
func (w *window) summaryLocked(now time.Time) *slog.Record {
	total := 0
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(w.counts)) {
		total += w.counts[k]
		parts = append(parts, fmt.Sprintf("%s=%d", k, w.counts[k]))
	}
	opens, start := w.opens, w.start
	clear(w.counts)
	w.opens, w.start = 0, time.Time{}
	if total == 0 && opens == 0 {
		return nil
	}
	r := slog.NewRecord(now, slog.LevelInfo, "flows", 0)
	r.AddAttrs(slog.Int("ended", total), slog.String("by_action", strings.Join(parts, " ")), slog.Int("opened", opens),
		slog.Duration("over", now.Sub(start).Round(time.Second)))
	return &r
}

// flush writes the pending summary, if any.
func (s *flowSummary) flush() {
	s.w.mu.Lock()
	r := s.w.summaryLocked(s.now())
	s.w.mu.Unlock()
	if r != nil {
		s.next.Handle(context.Background(), *r)
	}
}

func (s *flowSummary) WithAttrs(as []slog.Attr) slog.Handler {
	return &flowSummary{next: s.next.WithAttrs(as), period: s.period, now: s.now, w: s.w}
}

func (s *flowSummary) WithGroup(g string) slog.Handler {
	return &flowSummary{next: s.next.WithGroup(g), period: s.period, now: s.now, w: s.w}
}
