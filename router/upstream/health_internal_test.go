package upstream

import (
	"testing"
	"time"
)

// TestHealthMachine drives the state machine with a clock of its own: each
// step happens at a time given in seconds since t0.
func TestHealthMachine(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type step struct {
		at    float64
		event string // "ok", "fail", "refused", "begin" (a flow starts), "release"
		// after the event:
		state     State
		retryIn   float64 // RetryAt - at, in seconds, when Down
		failures  int
		usable    bool
		trialTook bool // for "begin": whether it took the trial
	}
	steps := []step{
		{at: 0, event: "", state: Unknown, usable: true},
		{at: 1, event: "ok", state: Up, usable: true},
		{at: 2, event: "fail", state: Down, retryIn: 1, failures: 1, usable: false},
		{at: 2.5, event: "begin", state: Down, retryIn: 0.5, failures: 1, usable: false, trialTook: false}, // in backoff: no trial
		{at: 2.6, event: "fail", state: Down, retryIn: 2, failures: 2, usable: false},                      // a flow trying anyway
		{at: 4.6, event: "", state: Down, retryIn: 0, failures: 2, usable: true},                           // backoff over
		{at: 4.7, event: "begin", state: Down, retryIn: -0.1, failures: 2, usable: false, trialTook: true},
		{at: 4.8, event: "begin", state: Down, retryIn: -0.2, failures: 2, usable: false, trialTook: false}, // one trial at a time
		{at: 5, event: "fail", state: Down, retryIn: 4, failures: 3, usable: false},                         // the trial failed
		{at: 9, event: "begin", state: Down, retryIn: 0, failures: 3, usable: false, trialTook: true},
		{at: 9.1, event: "release", state: Down, retryIn: -0.1, failures: 3, usable: true}, // canceled trial: no outcome
		{at: 9.2, event: "fail", state: Down, retryIn: 8, failures: 4, usable: false},
		{at: 9.3, event: "fail", state: Down, retryIn: 16, failures: 5, usable: false},
		{at: 9.4, event: "fail", state: Down, retryIn: 32, failures: 6, usable: false},
		{at: 9.5, event: "fail", state: Down, retryIn: 60, failures: 7, usable: false}, // capped at max
		{at: 9.6, event: "fail", state: Down, retryIn: 60, failures: 8, usable: false},
		{at: 10, event: "refused", state: Up, usable: true},                          // the proxy answered: it works
		{at: 11, event: "fail", state: Down, retryIn: 1, failures: 1, usable: false}, // the backoff starts over
		{at: 12, event: "begin", state: Down, retryIn: 0, failures: 1, usable: false, trialTook: true},
		{at: 12.5, event: "ok", state: Up, usable: true},
	}
	h := health{base: time.Second, max: time.Minute}
	trial := false
	for i, s := range steps {
		now := at(s.at)
		switch s.event {
		case "ok":
			h.success(now, 5*time.Millisecond, true, trial)
			trial = false
		case "refused":
			h.success(now, 0, false, trial)
			trial = false
		case "fail":
			h.failure(now, "boom", trial)
			trial = false
		case "begin":
			took := h.begin(now)
			if took != s.trialTook {
				t.Errorf("step %d (t=%v): begin took the trial = %v, want %v", i, s.at, took, s.trialTook)
			}
			trial = trial || took
		case "release":
			h.release(trial)
			trial = false
		}
		if h.st != s.state {
			t.Errorf("step %d (t=%v %s): state %v, want %v", i, s.at, s.event, h.st, s.state)
		}
		if h.failures != s.failures {
			t.Errorf("step %d (t=%v %s): failures %d, want %d", i, s.at, s.event, h.failures, s.failures)
		}
		if s.state == Down {
			if got, want := h.retryAt.Sub(now), time.Duration(s.retryIn*float64(time.Second)); got != want {
				t.Errorf("step %d (t=%v %s): retry in %v, want %v", i, s.at, s.event, got, want)
			}
		} else if !h.retryAt.IsZero() {
			t.Errorf("step %d: retryAt %v while %v", i, h.retryAt, h.st)
		}
		if got := h.usable(now); got != s.usable {
			t.Errorf("step %d (t=%v %s): usable %v, want %v", i, s.at, s.event, got, s.usable)
		}
	}
	if h.lastErr != "boom" || !h.errAt.Equal(at(11)) {
		t.Errorf("last error %q at %v, want boom at t=11", h.lastErr, h.errAt)
	}
	if h.latency != 5*time.Millisecond || !h.latAt.Equal(at(12.5)) {
		t.Errorf("latency %v at %v, want 5ms at t=12.5 (a refusal measures nothing)", h.latency, h.latAt)
	}
	if !h.since.Equal(at(12.5)) {
		t.Errorf("since %v, want t=12.5", h.since)
	}
}

// TestHealthBackoffNoOverflow fails an upstream many times with a large
// cap: the backoff stays at the cap.
func TestHealthBackoffNoOverflow(t *testing.T) {
	h := health{base: time.Second, max: 1000 * time.Hour}
	now := time.Unix(0, 0)
	for range 200 {
		h.failure(now, "x", false)
	}
	if got := h.retryAt.Sub(now); got != 1000*time.Hour {
		t.Errorf("backoff after 200 failures = %v, want the cap", got)
	}
}
