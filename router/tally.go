package router

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// refusals keeps the log readable under a flood of refused or failed flows: the first
// perReason flows of each reason in an interval are logged one by one (as their callers
// would log them), the rest only counted, and one WARN summary line per interval that had
// any gives the counts by reason, the number of sources and the source with the most. So a
// guest opening thousands of refused connections costs a few lines, not thousands. The
// summary goes out `every` after the first refusal of a quiet period (a timer; nothing
// runs in between), and at flush.
//
// mu guards every field below it; safe for concurrent use.
type refusals struct {
	log       *slog.Logger
	every     time.Duration
	perReason int

	mu      sync.Mutex
	counts  map[string]uint64 // by reason, this interval
	sources map[string]uint64 // by source, at most maxTallySources
	others  uint64            // refusals of sources beyond maxTallySources
	timer   *time.Timer       // armed while counts are pending
}

const (
	// defaultSummaryEvery is the interval of the refusal summary line.
	defaultSummaryEvery = time.Minute
	// perReasonLogged refusals of each reason are logged one by one per interval.
	perReasonLogged = 5
	// maxTallySources bounds the sources a summary tells apart.
	maxTallySources = 64
)

func newRefusals(log *slog.Logger, every time.Duration) *refusals {
	if every <= 0 {
		every = defaultSummaryEvery
	}
	return &refusals{log: log, every: every, perReason: perReasonLogged, counts: map[string]uint64{}, sources: map[string]uint64{}}
}

// note counts one refusal of reason from source who and reports whether the caller should
// log it one by one (the first perReason of its reason in this interval).
func (t *refusals) note(reason, who string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[reason]++
	if _, ok := t.sources[who]; ok || len(t.sources) < maxTallySources {
		t.sources[who]++
	} else {
		t.others++
	}
	if t.timer == nil {
		t.timer = time.AfterFunc(t.every, t.flush)
	}
	return t.counts[reason] <= uint64(t.perReason)
}

// flush logs and resets the pending counts, if any.
func (t *refusals) flush() {
	t.mu.Lock()
	counts, sources, others := t.counts, t.sources, t.others
	t.counts, t.sources, t.others = map[string]uint64{}, map[string]uint64{}, 0
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.mu.Unlock()
	if len(counts) == 0 {
		return
	}
	var total, unlogged uint64
	attrs := []any{"interval", t.every}
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		n := counts[reason]
		total += n
		unlogged += n - min(n, uint64(t.perReason))
		attrs = append(attrs, reason, n)
	}
	top, topN := "", uint64(0)
	for who, n := range sources {
		if n > topN || (n == topN && who < top) {
			top, topN = who, n
		}
	}
	attrs = append(attrs, "total", total, "not_logged_one_by_one", unlogged, "sources", len(sources), "top_source", top, "top_source_flows", topN)
	if others > 0 {
		attrs = append(attrs, "other_sources_flows", others)
	}
	t.log.Warn("refused or failed flows (summary)", attrs...)
}
