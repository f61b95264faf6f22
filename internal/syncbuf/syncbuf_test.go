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

// TestMax: past Max bytes kept, writes are dropped and still reported written.
func TestMax(t *testing.T) {
	b := Buffer{Max: 8}
	for _, w := range []string{"12345", "6789", "abc"} {
		if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if got := b.String(); got != "123456789" {
		t.Fatalf("kept %q, want the writes until 8 bytes were kept", got)
	}
}
