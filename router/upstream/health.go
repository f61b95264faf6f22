package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// State is an upstream's health.
type State int

// The states of an upstream; see [Tracked].
const (
	Unknown State = iota // nothing tried yet: used like Up
	Up                   // the last outcome was a success
	Down                 // the last outcome was a failure
)

// String returns "unknown", "up" or "down".
func (s State) String() string {
	switch s {
	case Up:
		return "up"
	case Down:
		return "down"
	default:
		return "unknown"
	}
}

// HealthConfig tunes a [Tracked] upstream. The zero value has the default
// backoff and no probe.
type HealthConfig struct {
	// Backoff is how long one failure keeps the upstream down for a Group;
	// each failure in a row doubles it, up to MaxBackoff. Zero means
	// [DefaultBackoff] and [DefaultMaxBackoff].
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Every is the probe period (health_check); zero means no probe.
	Every time.Duration
	// Target is where a probe connects through the upstream
	// (health_target): a destination known to answer, given to the proxy
	// unresolved when it is a name. Required when Every is set.
	Target Addr
	// Timeout bounds one probe; zero means Every or [DefaultProbeTimeout],
	// whichever is shorter.
	Timeout time.Duration
	// Clock is what the backoffs and latencies are read from; nil means the
	// real clock. A test gives its own to move past a backoff at once. (The
	// probe period and the flows' deadlines keep the real clock.)
	Clock Clock
}

// Clock tells the time: a [Tracked] reads its backoffs and latencies from one.
type Clock interface{ Now() time.Time }

// realClock is the system's clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Defaults of [HealthConfig].
const (
	DefaultBackoff      = time.Second
	DefaultMaxBackoff   = time.Minute
	DefaultProbeTimeout = 10 * time.Second
)

// Status is a snapshot of an upstream's health, for `router status`. It
// holds no secret: errors never carry passwords.
type Status struct {
	Name  string
	State State
	// Since is when State was entered; zero while Unknown.
	Since time.Time
	// Failures counts the failures in a row (0 when Up).
	Failures int
	// RetryAt is, when Down, the end of the backoff: a Group puts the
	// upstream after the healthy ones until then.
	RetryAt time.Time
	// LastError is the text of the last failure; "" when there was none.
	LastError   string
	LastErrorAt time.Time
	// Latency is how long the last successful setup took (dial, TLS,
	// handshake, the proxy's connect to the destination); LatencyAt is when
	// it ended, zero when there was none.
	Latency   time.Duration
	LatencyAt time.Time
}

// health is the state machine drawn at [Tracked]. It is pure: the caller
// gives the time and holds the lock.
type health struct {
	base, max time.Duration

	st       State
	since    time.Time
	failures int
	retryAt  time.Time
	trial    bool // a flow is trying the upstream after its backoff
	lastErr  string
	errAt    time.Time
	latency  time.Duration
	latAt    time.Time
}

// usable reports whether a Group should try the upstream with the healthy
// ones at now.
func (h *health) usable(now time.Time) bool {
	return h.st != Down || !now.Before(h.retryAt) && !h.trial
}

// begin is called when a flow starts through the upstream; it reports
// whether the flow is the trial after a backoff (it must then end with
// success, failure or release).
func (h *health) begin(now time.Time) bool {
	if h.st == Down && !now.Before(h.retryAt) && !h.trial {
		h.trial = true
		return true
	}
	return false
}

// release ends a trial without an outcome.
func (h *health) release(trial bool) {
	if trial {
		h.trial = false
	}
}

func (h *health) success(now time.Time, latency time.Duration, measured bool, trial bool) {
	h.release(trial)
	if h.st != Up {
		h.st, h.since = Up, now
	}
	h.failures, h.retryAt = 0, time.Time{}
	if measured {
		h.latency, h.latAt = latency, now
	}
}

func (h *health) failure(now time.Time, err string, trial bool) {
	h.release(trial)
	if h.st != Down {
		h.st, h.since = Down, now
	}
	h.failures++
	backoff := h.base
	for i := 1; i < h.failures && backoff < h.max; i++ {
		backoff *= 2
	}
	h.retryAt = now.Add(min(backoff, h.max))
	h.lastErr, h.errAt = err, now
}

// Tracked is an [Upstream] with its health: every Connect and Associate
// through it (and every probe) feeds this state machine, and [Group] orders
// its members by it:
//
//	          success
//	Unknown ──────────► Up ◄───────┐
//	   │                │          │ success
//	   │ failure        │ failure  │
//	   └──────────────► Down ──────┘
//	                    ▲  │
//	                    └──┘ failure: the backoff doubles, up to the max
//
// A failure puts off the next try until the backoff ends (Status.RetryAt).
// Until then a Group tries the upstream only after its healthy members;
// from then on the first flow to come is its trial (the flows after it keep
// using the others until the trial's outcome is known), and a success of
// any flow or probe brings it Up. Tracked never refuses a flow itself:
// called directly, it always tries its upstream.
//
// How outcomes count: a success brings it Up and records the latency; a
// failure (see [Error] and the package documentation) brings it Down for a
// backoff that doubles with each failure in a row; an answer that refuses
// the destination shows the proxy works and counts as a success without a
// latency; a call whose context was canceled by the caller, and an
// Associate on an upstream that cannot carry UDP, count as nothing. A
// probe counts every failure, refusals included.
//
// Tracked is safe for concurrent use; mu guards the state machine only and
// is never held during I/O.
type Tracked struct {
	up  Upstream
	cfg HealthConfig
	log *slog.Logger

	mu sync.Mutex // guards h
	h  health
}

// Track returns u with its health, in state Unknown. log receives the
// changes of state (warn when it goes down, info when it comes back); nil
// discards them.
func Track(u Upstream, cfg HealthConfig, log *slog.Logger) (*Tracked, error) {
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxBackoff < cfg.Backoff {
		return nil, fmt.Errorf("upstream %s: max backoff %v is shorter than backoff %v", u.Name(), cfg.MaxBackoff, cfg.Backoff)
	}
	if cfg.Every < 0 {
		return nil, fmt.Errorf("upstream %s: probe period %v is negative", u.Name(), cfg.Every)
	}
	if cfg.Every > 0 {
		if cfg.Target == (Addr{}) || cfg.Target.Port == 0 {
			return nil, fmt.Errorf("upstream %s: a probe needs a target host:port", u.Name())
		}
		if cfg.Timeout <= 0 {
			cfg.Timeout = min(cfg.Every, DefaultProbeTimeout)
		}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	return &Tracked{up: u, cfg: cfg, log: log, h: health{base: cfg.Backoff, max: cfg.MaxBackoff}}, nil
}

// Name returns the upstream's name.
func (t *Tracked) Name() string { return t.up.Name() }

// Connect connects through the upstream and records the outcome.
func (t *Tracked) Connect(ctx context.Context, dst Addr, early []byte) (net.Conn, error) {
	trial, start := t.begin()
	c, err := t.up.Connect(ctx, dst, early)
	t.report(start, err, trial, false)
	return c, err
}

// Associate associates through the upstream and records the outcome.
func (t *Tracked) Associate(ctx context.Context) (Association, error) {
	trial, start := t.begin()
	a, err := t.up.Associate(ctx)
	t.report(start, err, trial, false)
	return a, err
}

// Probe connects through the upstream to the probe target now, closes the
// connection and records the outcome; it returns the error. It runs even
// when no period is set, as long as a target is; without one it returns
// an error and records nothing.
func (t *Tracked) Probe(ctx context.Context) error {
	if t.cfg.Target == (Addr{}) {
		return fmt.Errorf("upstream %s: no probe target", t.Name())
	}
	timeout := t.cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := t.cfg.Clock.Now()
	c, err := t.up.Connect(pctx, t.cfg.Target, nil)
	if c != nil {
		c.Close()
	}
	if ctx.Err() == nil { // a probe cut short by its caller tells nothing
		t.report(start, err, false, true)
	}
	return err
}

// Run probes the upstream at once and then every HealthConfig.Every until
// ctx ends. Without a period it returns at once.
func (t *Tracked) Run(ctx context.Context) {
	if t.cfg.Every <= 0 {
		return
	}
	tick := time.NewTicker(t.cfg.Every)
	defer tick.Stop()
	for {
		_ = t.Probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Status returns a snapshot of the upstream's health.
func (t *Tracked) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := &t.h
	return Status{
		Name: t.Name(), State: h.st, Since: h.since, Failures: h.failures, RetryAt: h.retryAt,
		LastError: h.lastErr, LastErrorAt: h.errAt, Latency: h.latency, LatencyAt: h.latAt,
	}
}

// usable reports whether a Group should try it with the healthy members now.
func (t *Tracked) usable() bool {
	now := t.cfg.Clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.h.usable(now)
}

func (t *Tracked) begin() (trial bool, start time.Time) {
	start = t.cfg.Clock.Now()
	t.mu.Lock()
	trial = t.h.begin(start)
	t.mu.Unlock()
	return trial, start
}

// report feeds the outcome of a call that started at start.
func (t *Tracked) report(start time.Time, err error, trial, probe bool) {
	now := t.cfg.Clock.Now()
	var ue *Error
	refused := errors.As(err, &ue) && ue.Refused
	t.mu.Lock()
	before := t.h.st
	switch {
	case err == nil:
		t.h.success(now, now.Sub(start), true, trial)
	case !probe && (errors.Is(err, context.Canceled) || errors.Is(err, ErrUDPUnsupported)):
		t.h.release(trial)
	case refused && !probe:
		t.h.success(now, 0, false, trial)
	default:
		t.h.failure(now, err.Error(), trial)
	}
	after, retry := t.h.st, t.h.retryAt
	t.mu.Unlock()
	switch {
	case after == Down && before != Down:
		t.log.Warn("upstream down", "upstream", t.Name(), "err", err.Error(), "retry_in", retry.Sub(now).Round(time.Millisecond))
	case after == Up && before == Down:
		t.log.Info("upstream up", "upstream", t.Name(), "latency", now.Sub(start).Round(time.Microsecond))
	}
}
