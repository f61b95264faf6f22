package router

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/router/upload"
)

// errIdle ends a relay whose two directions were both quiet for the idle timeout.
var errIdle = errors.New("idle timeout")

// errCut ends a flow that a reload's rules refuse.
var errCut = errors.New("ended at reload: the rules now refuse it")

// errClosed ends the flows still running when the Router is closed.
var errClosed = errors.New("router closed")

// relay copies both ways between two TCP connections until both directions have ended,
// then closes both. A direction ends at EOF (the other side is then half-closed with
// CloseWrite, so a request/response protocol that closes its sending side still gets its
// answer), at an error (both connections are then closed at once), or when neither direction
// moved a byte for idle (errIdle); a direction whose receiver takes nothing for idle also
// ends the flow with errIdle.
//
// The loop set (an epoll loop that splices, on Linux; a goroutine per direction elsewhere)
// waits for readability before it takes a pipe or buffer, so a quiet flow holds neither. On
// Linux a relayed flow holds no goroutine either: the connections leave Go's poller for the
// loop set's.
type relay struct {
	idle  time.Duration
	loops *loopSet
	// sockmap asks the loops to move the flow's bytes in the kernel (an eBPF sockmap, on
	// Linux) when it can: both sides TCP, the sockmap loaded, a place free in it.
	// Otherwise, and on other platforms, the flow is relayed as without it.
	sockmap bool
}

// result is how a flow ended: bytes sent up (a→b) and down (b→a), and the cause (nil for a
// clean end on both sides).
type result struct {
	up, down int64
	err      error
}

// meter is a flow's live byte counts, as the relay moves them: one atomic add per move (a
// splice of up to a pipe's worth, or one buffer), read by Status at any time. It counts
// what the relay moved, not the client's first bytes sent with the proxy request.
//
// A flow whose bytes the kernel moves (the sockmap) adds the kernel's counters, kept in
// memory shared with the kernel: load reads them without a system call.
type meter struct {
	up, down atomic.Int64
	kernel   atomic.Pointer[kernelBytes] // nil unless the kernel moves the flow's bytes
	// cut asks the relay to end the flow (stop); onCut, set by the relay, makes it notice.
	cut   atomic.Bool
	onCut atomic.Pointer[func()]
	// upload counts the bytes up against the guest's upload budget (relay_upload.go): set before
	// the relay starts; nil without a budget, and then nothing is counted.
	upload *upload.Flow
}

// stop asks the relay to end the flow with errCut (a reload whose rules refuse it), once; a
// flow held while its upload budget asks stops waiting for the answer.
// Safe from any goroutine, before or after the relay started.
func (m *meter) stop() {
	if m.cut.CompareAndSwap(false, true) {
		m.upload.Stop() // a flow held while its upload budget asks ends its wait
		if fn := m.onCut.Load(); fn != nil {
			(*fn)()
		}
	}
}

// watchCut makes fn run when the flow is stopped: at once when it already was.
func (m *meter) watchCut(fn func()) {
	m.onCut.Store(&fn)
	if m.cut.Load() {
		fn()
	}
}

// load returns the flow's bytes so far.
func (m *meter) load() (up, down int64) {
	up, down = m.up.Load(), m.down.Load()
	if k := m.kernel.Load(); k != nil {
		ku, kd := k.bytes()
		up, down = up+ku, down+kd
	}
	return up, down
}

// start (per platform) relays a (the client side) and b (the upstream side), counting the
// bytes in m as they move; it owns both from the call on and returns at once. done is called exactly once, after both connections
// are closed, on a loop goroutine (or the caller's, when the flow fails at once):
// it must not block, or it stalls every flow of its loop.

// run relays a (the client side) and b (the upstream side) until the flow ends and returns
// how it ended. It owns a and b from the call on.
func (r *relay) run(a *net.TCPConn, b net.Conn, m *meter) (up, down int64, err error) {
	ch := make(chan result, 1)
	r.start(a, b, m, func(res result) { ch <- res })
	res := <-ch
	return res.up, res.down, res.err
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}
