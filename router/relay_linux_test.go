package router

import (
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/roottest"
)

// countPipes counts this process's descriptors that are pipes.
func countPipes(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, "pipe:") {
			n++
		}
	}
	return n
}

// settledGoroutines returns the number of goroutines once the ones ending (an accept that
// delivered its connection) are gone: the count stays the same while every other goroutine
// gets to run, many times over (bounded).
func settledGoroutines() int {
	n, same := runtime.NumGoroutine(), 0
	for i := 0; i < 10000 && same < 100; i++ {
		runtime.Gosched()
		if m := runtime.NumGoroutine(); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

// TestIdleFlowsHoldNoGoroutineNorPipe: a flow that moved bytes and went quiet costs no
// goroutine and holds no splice pipe (the pool keeps a few empty ones for everybody).
func TestIdleFlowsHoldNoGoroutineNorPipe(t *testing.T) {
	rl := newTestRelay(t, time.Minute)
	// Start the loops and let the runtime settle before counting.
	app, peer, _ := relayed(t, rl)
	app.Write([]byte("x"))
	io.ReadFull(peer, make([]byte, 1))
	goroutines, pipes := settledGoroutines(), countPipes(t)

	const flows = 200
	for range flows {
		app, peer, _ := relayed(t, rl)
		app.SetDeadline(time.Now().Add(5 * time.Second))
		peer.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4)
		app.Write([]byte("ping"))
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatal(err)
		}
		peer.Write([]byte("pong"))
		if _, err := io.ReadFull(app, buf); err != nil {
			t.Fatal(err)
		}
	}
	// The flows' set-up goroutines end on their own: wait for them (bounded), then count.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine()-goroutines > 5 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if got := runtime.NumGoroutine() - goroutines; got > 5 {
		t.Errorf("%d idle flows hold %d more goroutines, want none", flows, got)
	}
	// Held pipes would be 2 descriptors per direction: 800 here.
	if got := countPipes(t) - pipes; got > 2*8 {
		t.Errorf("%d idle flows hold %d more pipe descriptors, want at most a pooled few", flows, got)
	}
}

// kernelRelay returns a relay that puts its flows into the sockmap; it needs root (ROUTER_E2E)
// and fails when the sockmap cannot be loaded.
func kernelRelay(t *testing.T, idle time.Duration) *relay {
	t.Helper()
	return kernelRelayBudget(t, idle, 0)
}

// kernelRelayBudget is kernelRelay with the sockmap's budget (0: its default).
func kernelRelayBudget(t *testing.T, idle time.Duration, budget uint32) *relay {
	t.Helper()
	roottest.Require(t)
	e := newLoopSet(nil)
	e.kernel.budget, e.kernel.after = budget, 0
	t.Cleanup(e.Close)
	if e.kernel.get() == nil {
		t.Fatal("the sockmap could not be loaded")
	}
	return &relay{idle: idle, loops: e, sockmap: true}
}
