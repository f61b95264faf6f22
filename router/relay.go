package router

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// errIdle ends a relay whose two directions were both quiet for the idle timeout.
var errIdle = errors.New("idle timeout")

// relay copies both ways between two TCP connections until both directions have ended,
// then closes both. A direction ends at EOF (the other side is then half-closed with
// CloseWrite, so a request/response protocol that closes its sending side still gets its
// answer), at an error (both connections are then closed at once), or when neither direction
// moved a byte for idle.
//
// The copy engine (spliceLoop on Linux, copyLoop elsewhere) waits for readability before it
// takes a pipe or buffer, so a quiet flow holds neither.
type relay struct {
	idle  time.Duration
	pipes *pipePool // Linux splice pipes; nil elsewhere
}

// stream is one direction of a relay.
type stream struct {
	src, dst *net.TCPConn
	n        atomic.Int64 // bytes copied
	last     atomic.Int64 // unix nanoseconds of the last byte moved
}

// run relays a (the client side) and b (the upstream side) and returns the bytes sent up
// (a→b) and down (b→a). The calling goroutine carries one direction.
func (r *relay) run(a, b *net.TCPConn) (up, down int64, err error) {
	now := time.Now().UnixNano()
	ab := &stream{src: a, dst: b}
	ba := &stream{src: b, dst: a}
	ab.last.Store(now)
	ba.last.Store(now)
	var wg sync.WaitGroup
	var errDown error
	wg.Add(1)
	go func() {
		defer wg.Done()
		errDown = r.pump(ba, ab)
	}()
	errUp := r.pump(ab, ba)
	wg.Wait()
	a.Close()
	b.Close()
	return ab.n.Load(), ba.n.Load(), cause(errUp, errDown)
}

// cause picks the error that ended a flow: the first one that is not merely the echo of the
// other direction closing the connections.
func cause(errs ...error) error {
	for _, err := range errs {
		if err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
	}
	return nil
}

// pump runs one direction to its end. other is the opposite direction, whose activity keeps
// this one from timing out while the peer on this side is only listening (a model that
// streams its answer for minutes to a client that sends nothing).
func (r *relay) pump(s, other *stream) error {
	err := r.copy(s, other)
	if err == nil {
		// EOF from src: pass the half-close on and let the other direction finish.
		s.dst.CloseWrite()
		return nil
	}
	// Any other end tears the whole flow down: close both so the other pump returns too.
	s.src.Close()
	s.dst.Close()
	return err
}

// timedOut decides, after src was quiet for the idle timeout, whether the flow is idle:
// it is not when the other direction moved within the timeout.
func (r *relay) timedOut(s, other *stream) bool {
	last := max(s.last.Load(), other.last.Load())
	return time.Since(time.Unix(0, last)) >= r.idle
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}
