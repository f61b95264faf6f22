package progress_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/internal/clock/clocktest"
	"github.com/agentcage/router/internal/progress"
	"github.com/agentcage/router/internal/syncbuf"
)

// term is a fake terminal: what is written to it, and how much of that the test has read
// (take is called from the test's goroutine alone).
type term struct {
	syncbuf.Buffer
	read int
}

// take returns what was written since the last take.
func (t *term) take() string {
	s := t.String()
	out := s[t.read:]
	t.read = len(s)
	return out
}

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// TestLineOnTerminal: nothing for the first second; then the step and the seconds, redrawn
// in place each second and at a new step; Done clears it, and nothing follows.
func TestLineOnTerminal(t *testing.T) {
	clock := clocktest.New(t0)
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

// TestLineSilent: an operation done within the second writes nothing, nor does one shown to
// anything but a terminal, however long; neither leaves a timer.
func TestLineSilent(t *testing.T) {
	for _, c := range []struct {
		name  string
		tty   bool
		width int
		run   func(l *progress.Line, clock *clocktest.Clock)
	}{
		{"a quick operation", true, 80, func(l *progress.Line, clock *clocktest.Clock) {
			clock.Advance(500 * time.Millisecond)
			l.Done()
			clock.Advance(5 * time.Second)
		}},
		{"not a terminal", false, 0, func(l *progress.Line, clock *clocktest.Clock) {
			clock.Advance(3 * time.Second)
			l.Step("linting")
			clock.Advance(3 * time.Second)
			l.Done()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := clocktest.New(t0)
			out := &term{}
			c.run(progress.Start(out, c.tty, c.width, clock, "reading"), clock)
			if got := out.take(); got != "" || clock.Pending() != 0 {
				t.Errorf("%q, %d timers armed", got, clock.Pending())
			}
		})
	}
}

// TestLineWidth: a line longer than the terminal is cut one column short of it, so that
// it never wraps.
func TestLineWidth(t *testing.T) {
	clock := clocktest.New(t0)
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
	clock := clocktest.New(t0)
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
