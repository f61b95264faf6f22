//go:build !linux

package router

import (
	"log/slog"
	"net"
)

// loopSet has no state outside Linux: each flow runs on a goroutine per direction.
type loopSet struct{}

func newLoopSet(*slog.Logger) *loopSet { return &loopSet{} }

// Close does nothing.
func (*loopSet) Close() {}

// pending reads nothing ahead outside Linux: the relay moves every byte.
func pending(*net.TCPConn, []byte) int { return 0 }

// start relays a and b with copyRelay.
func (r *relay) start(a *net.TCPConn, b net.Conn, m *meter, done func(result)) {
	r.copyRelay(a, asHalfCloser(b), m, done)
}

// kernelBytes is nothing outside Linux: no flow's bytes move in the kernel.
type kernelBytes struct{}

func (*kernelBytes) bytes() (up, down int64) { return 0, 0 }
