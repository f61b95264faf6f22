package router

// The socket helpers the event loops use on bare descriptors: a non-blocking dial, accept4,
// the addresses of a socket, a peek, a write, a reset, keep-alive, and a descriptor wrapped as
// a net.TCPConn (for a flow handed to a goroutine).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dialFD is the default ConnectFD: a non-blocking TCP socket of dst's family, with control
// applied (the mark), connecting to dst. (The loop sets Go's options once it connects.)
func dialFD(raw *rawFD, control func(network, address string, c syscall.RawConn) error, dst netip.AddrPort) (int, bool, error) {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	family, network := unix.AF_INET6, "tcp6"
	if dst.Addr().Is4() {
		family, network = unix.AF_INET, "tcp4"
	}
	fd, err := rawSocket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	if err != nil {
		return -1, false, fmt.Errorf("socket: %w", err)
	}
	if control != nil {
		raw.fd = fd
		if err := control(network, dst.String(), raw); err != nil {
			closeFD(fd)
			return -1, false, err
		}
	}
	var sa unix.RawSockaddrAny
	n := putSockaddr(&sa, dst)
	_, _, e := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(n))
	switch e {
	case 0:
		return fd, true, nil
	case unix.EINPROGRESS, unix.EINTR:
		return fd, false, nil
	}
	closeFD(fd)
	return -1, false, e
}

// keepAlive sets what Go sets on every TCP connection it makes or accepts: keep-alive probes
// after idle, every 15 s, 9 of them (idle: 15 s for the listener's, 30 s for the router's
// dialer).
func keepAlive(fd int, idle time.Duration) {
	rawSetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(idle/time.Second))
	rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15)
	rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9)
}

// rawFD is a syscall.RawConn over a bare descriptor, for Control functions: Control runs its
// function on it; Read and Write are not supported.
type rawFD struct{ fd int }

func (c *rawFD) Control(f func(fd uintptr)) error { f(uintptr(c.fd)); return nil }

func (c *rawFD) Read(func(fd uintptr) bool) error { return errors.ErrUnsupported }

func (c *rawFD) Write(func(fd uintptr) bool) error { return errors.ErrUnsupported }

// fileConn makes a *net.TCPConn of fd for the goroutine path, and closes fd (the connection
// has a descriptor of its own, with Go's options set).
func fileConn(fd int) (*net.TCPConn, error) {
	f := os.NewFile(uintptr(fd), "")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, errors.New("not a TCP connection")
	}
	return tc, nil
}

// accept4 accepts one connection on lfd, non-blocking, with its peer address (sa is the
// loop's buffer).
func accept4(lfd int, sa *unix.RawSockaddrAny) (int, netip.AddrPort, error) {
	n := uint32(unsafe.Sizeof(*sa))
	fd, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(lfd), uintptr(unsafe.Pointer(sa)), uintptr(unsafe.Pointer(&n)),
		unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, netip.AddrPort{}, e
	}
	return int(fd), parseSockaddr(sa), nil
}

// sockname is fd's local address.
func sockname(fd int, sa *unix.RawSockaddrAny) (netip.AddrPort, error) {
	n := uint32(unsafe.Sizeof(*sa))
	_, _, e := unix.RawSyscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(sa)), uintptr(unsafe.Pointer(&n)))
	if e != 0 {
		return netip.AddrPort{}, fmt.Errorf("local address: %w", e)
	}
	return parseSockaddr(sa), nil
}

// parseSockaddr reads an AF_INET or AF_INET6 address (an IPv4-mapped one unmapped).
func parseSockaddr(sa *unix.RawSockaddrAny) netip.AddrPort {
	switch sa.Addr.Family {
	case unix.AF_INET:
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&a.Port))[:]))
	case unix.AF_INET6:
		a := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&a.Port))[:]))
	}
	return netip.AddrPort{}
}

// putSockaddr writes dst into sa and returns its length.
func putSockaddr(sa *unix.RawSockaddrAny, dst netip.AddrPort) int {
	*sa = unix.RawSockaddrAny{}
	if dst.Addr().Is4() {
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		a.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&a.Port))[:], dst.Port())
		a.Addr = dst.Addr().As4()
		return unix.SizeofSockaddrInet4
	}
	a := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
	a.Family = unix.AF_INET6
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&a.Port))[:], dst.Port())
	a.Addr = dst.Addr().As16()
	return unix.SizeofSockaddrInet6
}

// recvPeek looks at what fd has without taking it.
func recvPeek(fd int, b []byte) (int, error) {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_DONTWAIT|unix.MSG_PEEK, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}

// writeNow writes what fd takes of b now (EAGAIN is 0 written, not an error).
func writeNow(fd int, b []byte) (int, error) {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, nil
		}
		return 0, e
	}
}

// resetFD closes fd with an RST (SO_LINGER 0), so the client learns at once that the flow is
// refused.
func resetFD(fd int) {
	if fd < 0 {
		return
	}
	rawSetLinger0(fd)
	closeFD(fd)
}
