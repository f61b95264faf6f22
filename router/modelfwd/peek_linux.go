package modelfwd

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// What peekConn saw of a socket.
const (
	peekUnknown = iota // it could not be asked, or a deadline ended the wait
	peekEmpty          // nothing to read now
	peekData           // bytes wait to be read
	peekEnd            // the peer closed (EOF), or the socket failed
)

// peekConn looks at what c's socket holds without taking any of it (MSG_PEEK); with wait
// it first waits (through the runtime's poller, as a read would) until the socket holds
// something, so it never reports peekEmpty.
func peekConn(c net.Conn, wait bool) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peekUnknown
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return peekUnknown
	}
	var b [1]byte
	seen := peekUnknown
	err = raw.Read(func(fd uintptr) bool {
		n, err := recvPeek(int(fd), b[:])
		switch {
		case errors.Is(err, unix.EAGAIN):
			seen = peekEmpty
			return !wait
		case err != nil || n == 0:
			seen = peekEnd
		default:
			seen = peekData
		}
		return true
	})
	if err != nil {
		return peekUnknown
	}
	return seen
}

// recvPeek looks at what fd has without taking it, and without waiting.
func recvPeek(fd int, b []byte) (int, error) {
	for {
		n, _, err := unix.Recvfrom(fd, b, unix.MSG_DONTWAIT|unix.MSG_PEEK)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}
