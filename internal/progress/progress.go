// Package progress shows how a long operation goes on one line of a terminal, redrawn in
// place: nothing for an operation that ends within a second, then the current step and
// the seconds since the start, once a second and at each new step, until Done clears the
// line for what the command prints next.
//
// It writes only to a terminal: a Line made for anything else (a pipe, a file, a test's
// buffer) writes nothing, so a script's output never holds it. The clock is injected; a
// Line is safe for concurrent use.
package progress

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/agentcage/router/internal/clock"
)

// Delay is how long an operation runs before its line appears, and how often the line is
// redrawn while a step runs.
const Delay = time.Second

// Line is one operation's progress line.
type Line struct {
	mu    sync.Mutex
	w     io.Writer   // nil: not a terminal, nothing is written
	width int         // the terminal's columns; 0: unknown
	clock clock.Clock // the time a Line reads and the timer it redraws by
	start time.Time
	step  string
	shown bool // the line is on the terminal (Done clears it)
	done  bool
	stop  func() bool
}

// Start begins an operation's line on w, a terminal when tty (width columns wide; 0:
// unknown), with its first step. The line appears after Delay, if the operation has not
// ended by then.
func Start(w io.Writer, tty bool, width int, c clock.Clock, step string) *Line {
	l := &Line{width: width, clock: c, step: step}
	if !tty {
		l.done = true
		return l
	}
	l.w = w
	l.start = c.Now()
	l.stop = c.AfterFunc(Delay, l.tick)
	return l
}

// Step names the operation's current step ("linting 4000 rules"); the line shows it at once
// if it is already shown.
func (l *Line) Step(step string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.step = step
	if l.shown {
		l.drawLocked()
	}
}

// Done ends the operation: the line, if shown, is cleared, so that the command's output
// starts on a clean line. Later calls do nothing.
func (l *Line) Done() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done = true
	l.stop()
	if l.shown {
		io.WriteString(l.w, "\r\x1b[K")
	}
}

// tick draws the line and arms the next redraw.
func (l *Line) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.drawLocked()
	l.stop = l.clock.AfterFunc(Delay, l.tick)
}

// drawLocked writes the line over the last one: the step, then the whole seconds since the
// start, cut to the terminal's width so that it never wraps (a wrapped line is not redrawn
// in place).
func (l *Line) drawLocked() {
	s := fmt.Sprintf("%s… %ds", l.step, int(l.clock.Now().Sub(l.start)/time.Second))
	if r := []rune(s); l.width > 1 && len(r) > l.width-1 {
		s = string(r[:l.width-1])
	}
	io.WriteString(l.w, "\r"+s+"\x1b[K")
	l.shown = true
}
