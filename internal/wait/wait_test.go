package wait

import (
	"errors"
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
