package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// logSource is the part of *lab.Router the printer reads.
type logSource interface {
	Log() string             // everything written so far
	Exited() <-chan struct{} // closed when the process ended
}

// routerLog prints a router's output to w, each line once and prefixed, from where the last
// print stopped. It is not safe for concurrent use: follow owns it until follow returns.
type routerLog struct {
	src    logSource
	w      io.Writer
	prefix string
	done   int // bytes of src.Log() printed
}

// printNew prints the complete lines written since the last print; with final, also a last
// line that has no newline yet.
func (l *routerLog) printNew(final bool) {
	s := l.src.Log()
	if len(s) < l.done { // cannot happen with lab.Router's growing buffer; start over rather than panic
		l.done = 0
	}
	s = s[l.done:]
	if !final {
		i := strings.LastIndexByte(s, '\n')
		if i < 0 {
			return
		}
		s = s[:i+1]
	}
	l.done += len(s)
	for line := range strings.Lines(s) {
		fmt.Fprintf(l.w, "%s%s\n", l.prefix, strings.TrimRight(line, "\n"))
	}
}

// follow prints new lines every interval until ctx ends or the router exits (then also the
// last partial line).
// It reports whether the router exited.
func (l *routerLog) follow(ctx context.Context, every time.Duration) (exited bool) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.printNew(false) // the rest comes with the router's last words, after Stop
			return false
		case <-l.src.Exited():
			l.printNew(true)
			return true
		case <-t.C:
			l.printNew(false)
		}
	}
}
