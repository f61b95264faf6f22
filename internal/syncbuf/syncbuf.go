// Package syncbuf is the log sink that tests and the lab read while goroutines write to it.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it (a logger's or a process's output) and returns it
// whole. It is safe for concurrent use; its zero value is ready. It keeps everything up to
// Max bytes: it is for tests and for the lab, whose runs are bounded.
type Buffer struct {
	// Max bounds what is kept: once Max bytes are kept, later writes are dropped (and still
	// reported written). 0: no bound. Set it before the first write.
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p (nothing once Max bytes are kept); it never fails.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Max > 0 && s.b.Len() >= s.Max {
		return len(p), nil
	}
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
