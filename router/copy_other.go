//go:build !linux

package router

import (
	"io"
	"time"
)

// pipePool has no use outside Linux.
type pipePool struct{}

func newRelayPipes() *pipePool { return nil }

// Close does nothing.
func (*pipePool) Close() {}

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
