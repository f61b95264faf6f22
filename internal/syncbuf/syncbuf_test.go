package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWrites writes from several goroutines while reading (run with -race): every
// write is kept whole.
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("line\n"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := strings.Count(b.String(), "line\n"); got != 400 {
		t.Fatalf("%d lines kept, want 400", got)
	}
}
