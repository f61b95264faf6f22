// Package wait is how a test waits for an event it cannot be told of directly: a condition
// polled at a short, growing interval until it holds or a bound passes. Tests wait for
// events and never sleep to order them; where a channel, a callback or a counter the code
// under test exposes can say that the event happened, wait on that instead, and use this
// package only to poll such a counter.
//
// The bound is a ceiling for a broken build, not a timing bet: pick it large (seconds), so a
// loaded machine only makes a passing test slower, never a failing one.
package wait

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Poll intervals: the first poll comes at once, then after first, doubling up to most.
const (
	first = time.Millisecond
	most  = 50 * time.Millisecond
)

// For polls cond until it returns true. When it has not within d, For fails t with Fatal,
// naming what it waited for. It must be called from the test's goroutine.
func For(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	if !Poll(d, cond) {
		t.Fatalf("waited %v for %s: it did not happen", d, what)
	}
}

// Poll polls cond until it returns true, and reports whether it did within d. For a test
// that says in its own words what went wrong (often with the state it polled) when cond
// never held.
func Poll(d time.Duration, cond func() bool) bool {
	return Until(d, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) == nil
}

// errNotYet is what a bare condition returns to Until while it does not hold.
var errNotYet = errors.New("not yet")

// Until polls try until it returns nil, and returns nil then; when d passes first it returns
// try's last error, wrapped with how long it waited. try runs on the caller's goroutine.
func Until(d time.Duration, try func() error) error {
	deadline := time.Now().Add(d)
	step := first
	for {
		err := try()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", d, err)
		}
		time.Sleep(step)
		step = min(2*step, most)
	}
}

// Started waits until ready is closed: a server the test started in a goroutine says it is
// serving. When done (the goroutine's result) comes first, or d passes, it fails t with
// Fatal, naming what it waited for. It must be called from the test's goroutine.
func Started(t testing.TB, what string, d time.Duration, ready <-chan struct{}, done <-chan error) {
	t.Helper()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("%s ended before it was ready: %v", what, err)
	case <-time.After(d):
		t.Fatalf("waited %v for %s to be ready: it was not", d, what)
	}
}
