//go:build !linux

package router

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// engine has no state outside Linux: each flow runs on a goroutine per direction.
type engine struct{}

func newEngine() *engine { return &engine{} }

// Close does nothing.
func (*engine) Close() {}

// pending reads nothing ahead outside Linux: the relay moves every byte.
func pending(*net.TCPConn, []byte) int { return 0 }

// stream is one direction of a relay.
type stream struct {
	src, dst *net.TCPConn
	n        atomic.Int64 // bytes copied
	last     atomic.Int64 // unix nanoseconds of the last byte moved
}

// start relays a and b on two goroutines and calls done once when both directions ended
// and both connections are closed.
func (r *relay) start(a, b *net.TCPConn, done func(result)) {
	go func() {
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
		done(result{up: ab.n.Load(), down: ba.n.Load(), err: cause(errUp, errDown)})
	}()
}

// pump runs one direction to its end. other is the opposite direction, whose activity keeps
// this one from timing out while the peer on this side is only listening.
func (r *relay) pump(s, other *stream) error {
	err := r.copy(s, other)
	if err == nil {
		s.dst.CloseWrite()
		return nil
	}
	s.src.Close()
	s.dst.Close()
	return err
}

// copy moves s.src to s.dst with a buffer until EOF (nil), an error, or idleness (errIdle).
func (r *relay) copy(s, other *stream) error {
	buf := make([]byte, 32<<10)
	for {
		if err := s.src.SetReadDeadline(time.Now().Add(r.idle)); err != nil {
			return err
		}
		n, err := s.src.Read(buf)
		if n > 0 {
			s.dst.SetWriteDeadline(time.Now().Add(r.idle))
			if _, werr := s.dst.Write(buf[:n]); werr != nil {
				return werr
			}
			s.n.Add(int64(n))
			s.last.Store(time.Now().UnixNano())
		}
		switch {
		case err == nil:
		case err == io.EOF:
			return nil
		case isTimeout(err):
			if r.timedOut(s, other) {
				return errIdle
			}
		default:
			return err
		}
	}
}

// timedOut decides, after src was quiet for the idle timeout, whether the flow is idle:
// it is not when the other direction moved within the timeout.
func (r *relay) timedOut(s, other *stream) bool {
	last := max(s.last.Load(), other.last.Load())
	return time.Since(time.Unix(0, last)) >= r.idle
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
