// Package syncbuf is the log sink that tests and the lab read while goroutines write to it.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it (a logger's or a process's output) and returns it
// whole. It is safe for concurrent use; its zero value is ready. It keeps everything: it is
// for tests and for the lab, whose runs are bounded.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
