package clock_test

import (
	"testing"
	"time"

	"github.com/agentcage/router/internal/clock"
)

// TestSystemClock: the system clock's timer runs and can be stopped.
func TestSystemClock(t *testing.T) {
	ran := make(chan struct{})
	clock.System{}.AfterFunc(time.Millisecond, func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the timer did not run")
	}
	if stop := (clock.System{}).AfterFunc(time.Hour, func() {}); !stop() {
		t.Error("an armed timer was not stopped")
	}
}
