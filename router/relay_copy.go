package router

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/router/upload"
)

// halfCloser is a connection whose sending side can be closed alone (TCP, TLS).
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// asHalfCloser gives c a CloseWrite: its own, or a full Close for a connection without one.
func asHalfCloser(c net.Conn) halfCloser {
	if h, ok := c.(halfCloser); ok {
		return h
	}
	return closeOnly{c}
}

type closeOnly struct{ net.Conn }

func (c closeOnly) CloseWrite() error { return c.Close() }

// stream is one direction of a relay.
type stream struct {
	src, dst halfCloser
	n        *atomic.Int64 // bytes copied: the flow's meter
	upload   *upload.Flow  // the up direction's upload budget; nil: none (see meter)
	last     atomic.Int64  // unix nanoseconds of the last byte moved
}

// copyRelay relays a and b on two goroutines, through a buffer, and calls done once when
// both directions ended and both connections are closed: the relay of platforms without the
// splice loops, and of connections it cannot take (TLS to an https proxy).
func (r *relay) copyRelay(a, b halfCloser, m *meter, done func(result)) {
	go func() {
		now := time.Now().UnixNano()
		up0, down0 := m.up.Load(), m.down.Load()
		ab := &stream{src: a, dst: b, n: &m.up, upload: m.upload}
		ba := &stream{src: b, dst: a, n: &m.down}
		ab.last.Store(now)
		ba.last.Store(now)
		m.watchCut(func() { a.Close(); b.Close() })
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
		err := cause(errUp, errDown)
		if m.cut.Load() {
			err = errCut
		}
		done(result{up: ab.n.Load() - up0, down: ba.n.Load() - down0, err: err})
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
	if err == errOverUpload {
		lingerZero(s.src) // reset both: the flow is cut, not ended
		lingerZero(s.dst)
	}
	s.src.Close()
	s.dst.Close()
	return err
}

// lingerZero makes c's close a reset (SO_LINGER 0), when c is a TCP connection.
func lingerZero(c net.Conn) {
	if t, ok := c.(interface{ SetLinger(int) error }); ok {
		t.SetLinger(0)
	}
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
			if s.upload != nil && s.upload.Add(int64(n)) {
				return errOverUpload // before the chunk is passed on
			}
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
