//go:build windows

package service

import (
	"strings"
	"sync"
)

// lineBuffer captures what one formatting call writes, for handlers that forward whole
// records elsewhere (the Windows event log).
type lineBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lineBuffer) Write(p []byte) (int, error) { return l.b.Write(p) }

// format runs write (which writes to l) and returns what it wrote, without the newline.
func (l *lineBuffer) format(write func() error) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
	err := write()
	return strings.TrimRight(l.b.String(), "\n"), err
}
