package accept

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	var b Backoff
	var got []time.Duration
	for range 10 {
		got = append(got, b.Failed())
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("pauses %v, want %v ms", got, want)
		}
	}
	b.Accepted()
	if p := b.Failed(); p != MinPause {
		t.Errorf("after an accept: %v, want %v", p, MinPause)
	}
}

// closer counts Close calls.
type closer struct{ closed chan struct{} }

func (c *closer) Close() error { close(c.closed); return nil }

// TestLoop: errors pause and are told, connections are served, a closed listener and a done
// context end the loop with nil, and the listener is closed when ctx is done.
func TestLoop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ln := &closer{closed: make(chan struct{})}
	results := []error{syscall.EMFILE, syscall.EMFILE, nil, syscall.ECONNABORTED, nil}
	var served int
	var pauses []time.Duration
	i := 0
	done := make(chan error, 1)
	go func() {
		done <- Loop(ctx, ln, func() (int, error) {
			if i == len(results) {
				<-ln.closed
				return 0, net.ErrClosed
			}
			err := results[i]
			i++
			return i, err
		}, func(err error, pause time.Duration) {
			if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ECONNABORTED) {
				t.Errorf("told %v", err)
			}
			pauses = append(pauses, pause)
		}, func(int) {
			served++
			if served == 2 {
				cancel()
			}
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Loop = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Loop did not end after its context was done")
	}
	if served != 2 || len(pauses) != 3 || pauses[0] != MinPause || pauses[1] != 2*MinPause || pauses[2] != MinPause {
		t.Errorf("served %d, pauses %v", served, pauses)
	}
}
