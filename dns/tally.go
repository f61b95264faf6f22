package dns

import (
	"log/slog"
	"sync"
	"time"
)

// event is a kind of refused, failed or over-limit query that the summary log line counts.
type event int

const (
	evLiteral      event = iota // a query for an address literal, answered NXDOMAIN
	evRecycled                  // a pool address taken from its name before linger
	evPoolFull                  // SERVFAIL: no pool address could be had
	evBusy                      // SERVFAIL: the source has too many queries waiting for an upstream
	evRelayFailed               // SERVFAIL: the resolver through the proxy failed
	evDirectFailed              // SERVFAIL: the host's resolver failed (direct_names)
	evTCPRefused                // a TCP connection closed at accept: its source is over its limit
	evTCPEvicted                // an idle TCP connection closed to make room for another source
	evAcceptFailed              // the TCP listener's accept failed (retried after a pause)
	evWriteFailed               // a reply could not be sent (the client went away)
	evPackFailed                // a reply could not be packed (a bug: no reply is sent)
	numEvents
)

func (e event) String() string {
	switch e {
	case evLiteral:
		return "ip_literal"
	case evRecycled:
		return "recycled_early"
	case evPoolFull:
		return "pool_full"
	case evBusy:
		return "busy"
	case evRelayFailed:
		return "relay_failed"
	case evDirectFailed:
		return "direct_failed"
	case evTCPRefused:
		return "tcp_refused"
	case evTCPEvicted:
		return "tcp_evicted"
	case evAcceptFailed:
		return "accept_failed"
	case evWriteFailed:
		return "write_failed"
	case evPackFailed:
		return "pack_failed"
	}
	return "event"
}

// DefaultSummaryEvery is how often at most the summary of refused and failed queries is
// logged.
const DefaultSummaryEvery = time.Minute

// maxTallySources bounds the sources a summary tells apart; the others are counted together.
const maxTallySources = 64

// tally counts refused, failed and over-limit queries and logs one WARN line per interval
// that had any: the count of each kind, an example of each (the first of the interval),
// the number of sources and the source with the most. Nothing is logged per query, so a
// guest cannot flood the log. The line goes out `every` after the first event of a quiet
// period (a timer; no goroutine waits in between), and at close.
//
// mu guards every field below it; safe for concurrent use.
type tally struct {
	log   *slog.Logger
	every time.Duration

	mu      sync.Mutex
	counts  [numEvents]uint64
	example [numEvents]string
	sources map[string]uint64 // events by source label, at most maxTallySources
	others  uint64            // events of sources beyond maxTallySources
	timer   *time.Timer       // armed while counts are pending
}

func newTally(log *slog.Logger, every time.Duration) *tally {
	return &tally{log: log, every: every, sources: make(map[string]uint64)}
}

// add counts one event of source who; example, when not nil, describes it and is called only
// for the first event of its kind in the interval.
func (t *tally) add(ev event, who string, example func() string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[ev]++
	if t.counts[ev] == 1 && example != nil {
		t.example[ev] = example()
	}
	if _, ok := t.sources[who]; ok || len(t.sources) < maxTallySources {
		t.sources[who]++
	} else {
		t.others++
	}
	if t.timer == nil {
		t.timer = time.AfterFunc(t.every, t.flush)
	}
}

// flush logs and resets the pending counts, if any.
func (t *tally) flush() {
	t.mu.Lock()
	counts, example, sources, others := t.counts, t.example, t.sources, t.others
	t.counts, t.example, t.others = [numEvents]uint64{}, [numEvents]string{}, 0
	t.sources = make(map[string]uint64)
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.mu.Unlock()
	var total uint64
	attrs := []any{"interval", t.every}
	for ev, n := range counts {
		if n == 0 {
			continue
		}
		total += n
		attrs = append(attrs, event(ev).String(), n)
		if example[ev] != "" {
			attrs = append(attrs, event(ev).String()+"_example", example[ev])
		}
	}
	if total == 0 {
		return
	}
	top, topN := "", uint64(0)
	for who, n := range sources {
		if n > topN || (n == topN && who < top) {
			top, topN = who, n
		}
	}
	attrs = append(attrs, "sources", len(sources), "top_source", top, "top_source_events", topN)
	if others > 0 {
		attrs = append(attrs, "other_sources_events", others)
	}
	t.log.Warn("dns refused, failed or over-limit queries (summary)", attrs...)
}
