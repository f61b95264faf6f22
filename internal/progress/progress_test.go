package progress_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/internal/progress"
	"github.com/agentcage/router/internal/progress/progresstest"
)

// term is a fake terminal: it keeps what is written to it.
type term struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (t *term) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.Write(p)
}

// take returns what was written since the last take.
func (t *term) take() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.b.String()
	t.b.Reset()
	return s
}

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// TestLineOnTerminal: nothing for the first second; then the step and the seconds, redrawn
// in place each second and at a new step; Done clears it, and nothing follows.
func TestLineOnTerminal(t *testing.T) {
	clock := progresstest.New(t0)
	tty := &term{}
	l := progress.Start(tty, true, 80, clock, "reading big.ppx")
	clock.Advance(999 * time.Millisecond)
	l.Step("converting 4000 rules")
	if got := tty.take(); got != "" {
		t.Fatalf("before a second: %q", got)
	}
	clock.Advance(time.Millisecond)
	if got, want := tty.take(), "\rconverting 4000 rules… 1s\x1b[K"; got != want {
		t.Fatalf("at 1s: %q, want %q", got, want)
	}
	clock.Advance(1500 * time.Millisecond)
	if got, want := tty.take(), "\rconverting 4000 rules… 2s\x1b[K"; got != want {
		t.Fatalf("at 2.5s: %q, want %q", got, want)
	}
	l.Step("linting 4000 rules")
	if got, want := tty.take(), "\rlinting 4000 rules… 2s\x1b[K"; got != want {
		t.Fatalf("a new step: %q, want %q", got, want)
	}
	l.Done()
	if got, want := tty.take(), "\r\x1b[K"; got != want {
		t.Fatalf("done: %q, want %q", got, want)
	}
	l.Step("after")
	l.Done()
	clock.Advance(10 * time.Second)
	if got := tty.take(); got != "" || clock.Pending() != 0 {
		t.Errorf("after Done: %q, %d timers armed", got, clock.Pending())
	}
}

// TestLineQuick: an operation done within the second writes nothing, and leaves no timer.
func TestLineQuick(t *testing.T) {
	clock := progresstest.New(t0)
	tty := &term{}
	l := progress.Start(tty, true, 80, clock, "reading")
	clock.Advance(500 * time.Millisecond)
	l.Done()
	clock.Advance(5 * time.Second)
	if got := tty.take(); got != "" || clock.Pending() != 0 {
		t.Errorf("a quick operation: %q, %d timers armed", got, clock.Pending())
	}
}

// TestLineNotTerminal: to anything but a terminal, nothing is written, however long.
func TestLineNotTerminal(t *testing.T) {
	clock := progresstest.New(t0)
	out := &term{}
	l := progress.Start(out, false, 0, clock, "reading")
	clock.Advance(3 * time.Second)
	l.Step("linting")
	clock.Advance(3 * time.Second)
	l.Done()
	if got := out.take(); got != "" || clock.Pending() != 0 {
		t.Errorf("not a terminal: %q, %d timers armed", got, clock.Pending())
	}
}

// TestLineWidth: a line longer than the terminal is cut one column short of it, so that
// it never wraps.
func TestLineWidth(t *testing.T) {
	clock := progresstest.New(t0)
	tty := &term{}
	progress.Start(tty, true, 12, clock, "linting 4000 rules").Done()
	l := progress.Start(tty, true, 12, clock, "linting 4000 rules")
	clock.Advance(time.Second)
	got := tty.take()
	line := strings.TrimSuffix(strings.TrimPrefix(got, "\r"), "\x1b[K")
	if line != "linting 400" {
		t.Errorf("cut line: %q", got)
	}
	l.Done()
}

// TestLineConcurrent: steps from another goroutine while the clock redraws (run with -race).
func TestLineConcurrent(t *testing.T) {
	clock := progresstest.New(t0)
	tty := &term{}
	l := progress.Start(tty, true, 80, clock, "start")
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			l.Step("step " + string(rune('a'+i%26)))
		}
	})
	for range 20 {
		clock.Advance(500 * time.Millisecond)
	}
	wg.Wait()
	l.Done()
	if got := tty.take(); !strings.HasSuffix(got, "\r\x1b[K") {
		t.Errorf("the line was not cleared: %q", got)
	}
}

// TestSystemClock: the system clock's timer runs and can be stopped.
func TestSystemClock(t *testing.T) {
	ran := make(chan struct{})
	progress.System{}.AfterFunc(time.Millisecond, func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the timer did not run")
	}
	if stop := (progress.System{}).AfterFunc(time.Hour, func() {}); !stop() {
		t.Error("an armed timer was not stopped")
	}
}
