// Package tally keeps a log readable under a flood of refused or failed events (a guest
// opening thousands of refused connections or asking for thousands of bad names): events
// are counted by kind and by source, and one WARN summary line per interval that had any
// gives the counts by kind, an example of each, the number of sources and the source with
// the most. The first PerKind events of each kind in an interval may be logged one by one
// by the caller (Add says which); the rest are only counted. So a flood costs a few lines,
// not thousands. The summary goes out Every after the first event of a quiet period (a
// timer: nothing runs in between), and at Flush. The router's refused flows and the DNS
// server's refused queries both use it.
package tally

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// MaxSources bounds the sources a summary tells apart; the others are counted together.
const MaxSources = 64

// Options shape a Summary's line.
type Options struct {
	// Message is the summary line's message, e.g. "refused or failed flows (summary)".
	Message string
	// Unit names what is counted in the per-source attributes ("top_source_" + Unit).
	Unit string
	// PerKind events of each kind per interval are for the caller to log one by one; 0:
	// none. With PerKind > 0 the line also gives the total and the count not logged one by
	// one.
	PerKind int
}

// Summary counts events; see the package documentation. mu guards every field below it;
// it is safe for concurrent use.
type Summary struct {
	log   *slog.Logger
	every time.Duration
	opts  Options

	mu      sync.Mutex
	counts  map[string]uint64 // by kind, this interval
	example map[string]string // the first example of each kind
	sources map[string]uint64 // by source, at most MaxSources
	others  uint64            // events of sources beyond MaxSources
	timer   *time.Timer       // armed while counts are pending
}

// New returns a Summary that logs to log every interval that had events (every must be
// positive).
func New(log *slog.Logger, every time.Duration, opts Options) *Summary {
	return &Summary{log: log, every: every, opts: opts, counts: map[string]uint64{}, example: map[string]string{}, sources: map[string]uint64{}}
}

// Add counts one event of kind from source who and reports whether the caller should log
// it one by one (one of the first PerKind of its kind in this interval). example, when not
// nil, describes it and is called only for the first event of its kind in the interval.
func (t *Summary) Add(kind, who string, example func() string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[kind]++
	if t.counts[kind] == 1 && example != nil {
		t.example[kind] = example()
	}
	if _, ok := t.sources[who]; ok || len(t.sources) < MaxSources {
		t.sources[who]++
	} else {
		t.others++
	}
	if t.timer == nil {
		t.timer = time.AfterFunc(t.every, t.Flush)
	}
	return t.counts[kind] <= uint64(t.opts.PerKind)
}

// Count returns the events of kind counted in the current interval (not yet flushed).
func (t *Summary) Count(kind string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[kind]
}

// Flush logs and resets the pending counts, if any.
func (t *Summary) Flush() {
	t.mu.Lock()
	counts, example, sources, others := t.counts, t.example, t.sources, t.others
	t.counts, t.example, t.sources, t.others = map[string]uint64{}, map[string]string{}, map[string]uint64{}, 0
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
	for _, kind := range slices.Sorted(maps.Keys(counts)) {
		n := counts[kind]
		total += n
		unlogged += n - min(n, uint64(t.opts.PerKind))
		attrs = append(attrs, kind, n)
		if ex := example[kind]; ex != "" {
			attrs = append(attrs, kind+"_example", ex)
		}
	}
	top, topN := "", uint64(0)
	for who, n := range sources {
		if n > topN || (n == topN && who < top) {
			top, topN = who, n
		}
	}
	if t.opts.PerKind > 0 {
		attrs = append(attrs, "total", total, "not_logged_one_by_one", unlogged)
	}
	attrs = append(attrs, "sources", len(sources), "top_source", top, "top_source_"+t.opts.Unit, topN)
	if others > 0 {
		attrs = append(attrs, "other_sources_"+t.opts.Unit, others)
	}
	t.log.Warn(t.opts.Message, attrs...)
}
