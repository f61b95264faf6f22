// Package metrics serves the router's counters to Prometheus: a collector that turns one
// status snapshot per scrape into metrics, and the HTTP server behind [metrics] listen.
//
// The numbers are those `router status` shows. On each scrape the collector calls its status
// function once (the daemon's: the router's atomic counters, the refusal counts, upstream
// health, the DNS pool) and converts what it returns, so the relay's hot path pays nothing
// for metrics and a scrape costs what one `router status` costs. No label names a flow:
// the series are bounded by the config (its rules and upstreams) and the fixed list of
// refusal reasons.
//
// What the series mean over time:
//   - router_flows_total, router_bytes_total and router_refusals_total count from the
//     daemon's start (router_start_time_seconds) and never go down by design.
//   - router_rule_flows_total and router_rule_bytes_total count under the rule list the
//     last start or reload loaded; every reload starts them from zero. Prometheus reads
//     the drop as a counter reset, so rate() and increase() stay right across a reload; a
//     rule whose position or name changed is a new series.
//   - router_upstream_up is absent while an upstream's state is unknown (nothing tried
//     yet, which the router treats like up), so an alert on == 0 fires only on real
//     failures and no NaN spoils an aggregation.
//
// The registry holds the router's collector and the Go runtime's and the process's
// (collectors.NewGoCollector, collectors.NewProcessCollector); it is made per call, never
// the library's global default one, so two daemons in one test process do not meet.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/rules/refusal"
)

// Path is where the server answers.
const Path = "/metrics"

// Collector is a prometheus.Collector over the daemon's status. It keeps no state of its
// own: every Collect asks the status function once. Safe for concurrent use when the
// status function is.
type Collector struct {
	status func() control.Status

	start, flows, live, bytes, refusals          *prometheus.Desc
	ruleFlows, ruleBytes                         *prometheus.Desc
	ruleDisabled                                 *prometheus.Desc
	upstreamUp, upstreamLatency, upstreamFailure *prometheus.Desc
	poolSize, poolMapped, poolInUse              *prometheus.Desc
	reloads, configLoaded                        *prometheus.Desc
	uploadUsed, uploadLimit, namesUsed, namesMax *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector that calls status once per scrape. status must not be
// nil; it is called on the scraping goroutine and must be safe for concurrent use.
func NewCollector(status func() control.Status) *Collector {
	// desc describes a metric with no constant labels.
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	ruleLabels := []string{"index", "rule", "action"}
	return &Collector{
		status: status,
		start: desc("router_start_time_seconds",
			"When the daemon started, in seconds since the Unix epoch; the router_* counters other than the rules' count from then."),
		flows: desc("router_flows_total",
			"Flows since the daemon started: every flow decided (refused ones included) and every forward connection."),
		live: desc("router_flows_live",
			"Flows running now (relayed or being set up)."),
		bytes: desc("router_bytes_total",
			"Bytes relayed since the daemon started, of ended and live flows: direction=\"up\" from the clients, \"down\" to them.", "direction"),
		refusals: desc("router_refusals_total",
			"Refusals since the daemon started, by reason: the router's, the DNS server's and the capture's own (the kernel's or the Windows engine's).", "reason"),
		ruleDisabled: desc("router_rule_disabled",
			"1 for each rule kept in the config with enabled = false, which decides no flow.", "index", "rule"),
		ruleFlows: desc("router_rule_flows_total",
			"Flows each rule decided under the rule list of the last start or reload; every reload starts them from zero (a counter reset). index is the rule's 1-based position, 0 for an implicit step named by rule.", ruleLabels...),
		ruleBytes: desc("router_rule_bytes_total",
			"Bytes, both ways, of the flows each rule decided (ended and live) under the rule list of the last start or reload; every reload starts them from zero (a counter reset).", ruleLabels...),
		upstreamUp: desc("router_upstream_up",
			"1 when the upstream proxy's last connect or probe succeeded, 0 when it failed; absent while nothing was tried.", "upstream"),
		upstreamLatency: desc("router_upstream_latency_seconds",
			"How long the upstream's last successful set-up took (dial, TLS, handshake, the proxy's own connect); absent before the first.", "upstream"),
		upstreamFailure: desc("router_upstream_failures",
			"Failures in a row of the upstream proxy; 0 after a success.", "upstream"),
		poolSize: desc("router_dns_pool_size",
			"Addresses the fake-IP pool can hand out (fake-ip mode only)."),
		poolMapped: desc("router_dns_pool_mapped",
			"Fake-IP addresses that stand for a name now (fake-ip mode only)."),
		poolInUse: desc("router_dns_pool_in_use",
			"Fake-IP addresses with at least one open flow (fake-ip mode only)."),
		reloads: desc("router_reloads_total",
			"Reloads since the daemon started, by outcome: \"applied\", or \"refused\" (the running config stayed; router status shows the last refusal's error).", "outcome"),
		uploadUsed: desc("router_upload_window_bytes",
			"Bytes one guest sent up to one registrable domain (or address) in the guest's current window of the upload budget ([budget] bytes_up_per_domain); the largest counts only (router status lists the same). Absent without the budget.", "guest", "domain"),
		uploadLimit: desc("router_upload_window_limit_bytes",
			"The upload budget a series of router_upload_window_bytes is held to: past it, the guest's flows to the domain are cut and new ones refused (or, with over = \"alert\", logged; with \"ask\", as the host's owner answers).", "guest", "domain"),
		namesUsed: desc("router_dns_names_window",
			"Distinct names one guest looked up under one registrable domain in the guest's current window of the name budget ([budget] names_per_domain); the largest counts only (router status lists the same). Absent without the budget.", "guest", "domain"),
		namesMax: desc("router_dns_names_window_limit",
			"The name budget a series of router_dns_names_window is held to: past it, the guest's new names under the domain are refused (or, with over = \"alert\", logged; with \"ask\", as the host's owner answers).", "guest", "domain"),
		configLoaded: desc("router_config_loaded_time_seconds",
			"When the running config was loaded (the start or the last reload applied), in seconds since the Unix epoch."),
	}
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.start, c.flows, c.live, c.bytes, c.refusals, c.ruleFlows, c.ruleBytes, c.ruleDisabled,
		c.upstreamUp, c.upstreamLatency, c.upstreamFailure, c.poolSize, c.poolMapped, c.poolInUse, c.reloads, c.configLoaded, c.uploadUsed, c.uploadLimit, c.namesUsed, c.namesMax} {
		ch <- d
	}
}

// Collect takes one status snapshot and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if !st.Started.IsZero() {
		gauge(c.start, float64(st.Started.UnixNano())/1e9)
	}
	counter(c.flows, st.Totals.Flows)
	counter(c.reloads, st.Running.Reloads, "applied")
	counter(c.reloads, st.Running.Refused, "refused")
	if !st.Running.Loaded.IsZero() {
		gauge(c.configLoaded, float64(st.Running.Loaded.UnixNano())/1e9)
	}
	gauge(c.live, float64(st.Totals.Live))
	counter(c.bytes, st.Totals.Up, "up")
	counter(c.bytes, st.Totals.Down, "down")

	// Every reason, seen or not: a series that exists from the start at 0 lets rate() and
	// increase() see the first refusal.
	reasons := refusal.All()
	counts := make(map[string]uint64, len(reasons))
	for _, r := range reasons {
		counts[r.String()] = 0
	}
	for _, r := range st.Refusals {
		counts[r.Reason] += r.Count
	}
	for _, r := range reasons {
		counter(c.refusals, counts[r.String()], r.String())
		delete(counts, r.String())
	}
	for reason, n := range counts { // a reason this build does not know (none today)
		counter(c.refusals, n, reason)
	}

	for _, r := range st.Rules {
		labels := []string{strconv.Itoa(r.Index), r.Name, r.Action}
		counter(c.ruleFlows, r.Hits, labels...)
		counter(c.ruleBytes, r.Bytes, labels...)
		if r.Disabled {
			gauge(c.ruleDisabled, 1, strconv.Itoa(r.Index), r.Name)
		}
	}
	for _, u := range st.Upstreams {
		switch u.State {
		case "up":
			gauge(c.upstreamUp, 1, u.Name)
		case "down":
			gauge(c.upstreamUp, 0, u.Name)
		}
		if u.Latency > 0 {
			gauge(c.upstreamLatency, u.Latency.Seconds(), u.Name)
		}
		gauge(c.upstreamFailure, float64(u.Failures), u.Name)
	}
	for _, u := range st.DomainBudgets {
		used, limit := c.namesUsed, c.namesMax
		if u.Budget == control.BudgetBytesUp {
			used, limit = c.uploadUsed, c.uploadLimit
		}
		gauge(used, float64(u.Used), u.Guest, u.Domain)
		gauge(limit, float64(u.Limit), u.Guest, u.Domain)
	}
	if st.DNS.Pool != "" {
		gauge(c.poolSize, float64(st.DNS.PoolSize))
		gauge(c.poolMapped, float64(st.DNS.Mapped))
		gauge(c.poolInUse, float64(st.DNS.InUse))
	}
}

// NewRegistry returns a new registry (never the library's global one) holding the
// router's collector over status and the Go runtime and process collectors.
func NewRegistry(status func() control.Status) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(status), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Limits of the server: a scraper sends one small request and reads one answer; a client
// that dawdles or sends a big header is cut off, and at most MaxConns connections are open
// at once (the metrics endpoint's share of the descriptor budget). A connection that has
// sent nothing yet, or sits idle between requests, is closed after a second, and sooner
// when a new connection comes while MaxConns are open: the oldest such one makes room, so
// idle connections (a guest's 64 of them) never keep a scraper out. When every connection
// is answering a request, the new one is closed.
const (
	MaxConns          = 16
	maxInFlight       = 4
	maxHeaderBytes    = 8 << 10
	readHeaderTimeout = time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = time.Second
	gatherTimeout     = 10 * time.Second
)

// Handler returns the HTTP handler of the server: GET (and HEAD) Path with g's metrics in
// the format the client negotiates (text, or gzip when asked); 405 for another method on
// Path, 404 elsewhere. A metric that fails to gather is logged to log (nil: not logged) and
// left out; the others are served.
func Handler(g prometheus.Gatherer, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:            errorLog{log},
		ErrorHandling:       promhttp.ContinueOnError,
		OfferedCompressions: []promhttp.Compression{promhttp.Identity, promhttp.Gzip},
		MaxRequestsInFlight: maxInFlight,
		Timeout:             gatherTimeout,
	}))
	return mux
}

// errorLog hands promhttp's errors to slog.
type errorLog struct{ log *slog.Logger }

func (l errorLog) Println(v ...any) {
	l.log.Warn("metrics", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}

// Serve answers HTTP with h on ln until ctx is done, then closes ln and every open
// connection and returns nil; it returns an error when ln fails otherwise. It takes ln
// over: ln is closed when Serve returns.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := newGate(ln, MaxConns)
	srv := &http.Server{
		Handler:           h,
		ConnState:         g.state,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	err := srv.Serve(g)
	if errors.Is(err, http.ErrServerClosed) || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("metrics server: %w", err)
}

// gate is a listener that keeps at most max connections open: at the limit, a new one
// closes the oldest that is new (nothing read yet) or idle between requests, or is closed
// itself when all are active. state is the server's ConnState hook. mu guards conns.
type gate struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]gated
}

type gated struct {
	busy  bool // a request is being answered
	since time.Time
}

func newGate(ln net.Listener, max int) *gate {
	return &gate{Listener: ln, max: max, conns: map[net.Conn]gated{}}
}

func (g *gate) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		if len(g.conns) >= g.max {
			var oldest net.Conn
			var at time.Time
			for o, st := range g.conns {
				if !st.busy && (oldest == nil || st.since.Before(at)) {
					oldest, at = o, st.since
				}
			}
			if oldest == nil {
				g.mu.Unlock()
				c.Close()
				continue
			}
			delete(g.conns, oldest)
			oldest.Close() // the server sees it closed and forgets it
		}
		g.conns[c] = gated{since: time.Now()}
		g.mu.Unlock()
		return c, nil
	}
}

func (g *gate) state(c net.Conn, st http.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.conns[c]; !ok {
		return
	}
	switch st {
	case http.StateActive:
		g.conns[c] = gated{busy: true, since: time.Now()}
	case http.StateIdle:
		g.conns[c] = gated{since: time.Now()}
	case http.StateClosed, http.StateHijacked:
		delete(g.conns, c)
	}
}
