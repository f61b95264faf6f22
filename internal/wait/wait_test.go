package wait

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	if err := Until(5*time.Second, func() error {
		if n++; n < 4 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 4 {
		t.Errorf("Until = %v after %d tries, want nil after 4", err, n)
	}
	errGone := errors.New("gone")
	if err := Until(10*time.Millisecond, func() error { return errGone }); !errors.Is(err, errGone) {
		t.Errorf("Until past its bound = %v, want the last error wrapped", err)
	}
}

func TestFor(t *testing.T) {
	n := 0
	For(t, "the third poll", 5*time.Second, func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("polled %d times, want 3", n)
	}
}

func TestPoll(t *testing.T) {
	n := 0
	if !Poll(5*time.Second, func() bool { n++; return n == 2 }) || n != 2 {
		t.Errorf("Poll after %d polls: want true after 2", n)
	}
	if Poll(10*time.Millisecond, func() bool { return false }) {
		t.Error("Poll of a condition that never holds = true")
	}
}

// TestStarted: ready passes; a result before it, or no word within the bound, fails.
func TestStarted(t *testing.T) {
	ready, done := make(chan struct{}), make(chan error, 1)
	close(ready)
	Started(t, "a server", time.Second, ready, done)
	for _, c := range []struct {
		name string
		done error
		want string
	}{
		{"ended", errors.New("bind: in use"), "a server ended before it was ready: bind: in use"},
		{"silent", nil, "waited 1ms for a server to be ready: it was not"},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			if c.done != nil {
				done <- c.done
			}
			r := &recorder{TB: t}
			ran := make(chan struct{})
			go func() { // Fatal ends the goroutine it is called on
				defer close(ran)
				Started(r, "a server", time.Millisecond, make(chan struct{}), done)
			}()
			<-ran
			if r.msg != c.want {
				t.Errorf("failed with %q, want %q", r.msg, c.want)
			}
		})
	}
}

// recorder is a test that keeps what Fatalf says and ends the goroutine, as t.Fatalf does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
