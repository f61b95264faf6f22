package dns

import (
	"log/slog"
	"time"

	summary "github.com/agentcage/router/internal/tally"
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

// tally counts refused, failed and over-limit queries and logs one WARN line per interval
// that had any (package tally): the count of each kind, an example of each (the first of
// the interval), the number of sources and the source with the most. Nothing is logged per
// query, so a guest cannot flood the log. Safe for concurrent use.
type tally struct{ s *summary.Summary }

func newTally(log *slog.Logger, every time.Duration) *tally {
	return &tally{s: summary.New(log, every, summary.Options{Message: "dns refused, failed or over-limit queries (summary)", Unit: "events"})}
}

// add counts one event of source who; example, when not nil, describes it and is called only
// for the first event of its kind in the interval.
func (t *tally) add(ev event, who string, example func() string) { t.s.Add(ev.String(), who, example) }

// flush logs and resets the pending counts, if any.
func (t *tally) flush() { t.s.Flush() }
