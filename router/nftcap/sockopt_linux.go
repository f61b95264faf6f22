package nftcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST (include/uapi/linux/netfilter_ipv6/ip6_tables.h),
// the SOL_IPV6 twin of SO_ORIGINAL_DST; x/sys/unix does not name it.
const ip6tSOOriginalDst = 80

// OriginalDst returns the destination a redirected connection was addressed to before the
// table's redirect rewrote it, as conntrack recorded it: SO_ORIGINAL_DST for IPv4
// connections (also on a dual-stack [::] listener, where they appear IPv4-mapped) and
// IP6T_SO_ORIGINAL_DST for IPv6. The socket is read through SyscallConn: no descriptor is
// duplicated and its blocking mode is untouched. For a connection that was not NATed it
// returns the connection's own local address, which for one that TPROXY handed over
// (Spec.TCPTProxy) is its original destination; without a conntrack entry it fails
// (ENOENT).
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	remote, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok || remote == nil {
		return netip.AddrPort{}, errors.New("original dst: connection has no remote address")
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original dst: %w", err)
	}
	v4 := remote.AddrPort().Addr().Unmap().Is4()
	var dst netip.AddrPort
	var serr error
	if err := rc.Control(func(fd uintptr) { dst, serr = originalDst(int(fd), v4) }); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original dst: %w", err)
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("original dst: %w", serr)
	}
	return dst, nil
}

// OriginalDstFD is OriginalDst for a bare descriptor fd (an event loop's accepted socket),
// whose remote address is peer. It neither blocks nor changes fd.
func OriginalDstFD(fd int, peer netip.AddrPort) (netip.AddrPort, error) {
	dst, err := originalDst(fd, peer.Addr().Unmap().Is4())
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original dst: %w", err)
	}
	return dst, nil
}

func originalDst(fd int, v4 bool) (netip.AddrPort, error) {
	// Room for a sockaddr_in6 (28 bytes), the larger of the two answers.
	var buf [unix.SizeofSockaddrInet6]byte
	if v4 {
		n, err := getsockopt(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST, buf[:])
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: %w", err)
		}
		return parseSockaddr(buf[:n])
	}
	n, err := getsockopt(fd, unix.SOL_IPV6, ip6tSOOriginalDst, buf[:])
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockopt IP6T_SO_ORIGINAL_DST: %w", err)
	}
	return parseSockaddr(buf[:n])
}

// getsockopt is getsockopt(2) into buf; it returns the length the kernel wrote.
func getsockopt(fd, level, name int, buf []byte) (int, error) {
	n := uint32(len(buf))
	// Raw: it never blocks, and the router's event loops call it (a call the runtime is told
	// of would wake its sysmon thread).
	_, _, errno := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 {
		return 0, errno
	}
	return int(min(n, uint32(len(buf)))), nil
}

// parseSockaddr decodes a struct sockaddr_in or sockaddr_in6 as the kernel writes them:
// family in host order, port in network order.
func parseSockaddr(b []byte) (netip.AddrPort, error) {
	if len(b) < 2 {
		return netip.AddrPort{}, fmt.Errorf("sockaddr of %d bytes", len(b))
	}
	switch fam := binary.NativeEndian.Uint16(b); fam {
	case unix.AF_INET:
		if len(b) < 8 {
			return netip.AddrPort{}, fmt.Errorf("sockaddr_in of %d bytes", len(b))
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), nil
	case unix.AF_INET6:
		if len(b) < 24 {
			return netip.AddrPort{}, fmt.Errorf("sockaddr_in6 of %d bytes", len(b))
		}
		a := netip.AddrFrom16([16]byte(b[8:24])).Unmap()
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[2:4])), nil
	default:
		return netip.AddrPort{}, fmt.Errorf("sockaddr family %d", fam)
	}
}

// MarkControl returns a Control function for net.Dialer and net.ListenConfig that sets
// SO_MARK to mark on the socket before it connects or binds: the router's own sockets carry
// Spec.Mark and are never captured. Setting SO_MARK needs CAP_NET_ADMIN.
func MarkControl(mark uint32) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error { return SetMark(c, mark) }
}

// SetMark sets SO_MARK on the socket behind c, for callers composing their own Control.
func SetMark(c syscall.RawConn, mark uint32) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		// Raw, like getsockopt: it never blocks, and the router's event loops mark sockets.
		v := int32(mark)
		if _, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MARK,
			uintptr(unsafe.Pointer(&v)), 4, 0); e != 0 {
			serr = e
		}
	}); err != nil {
		return fmt.Errorf("set mark: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("set mark %#x: %w", mark, serr)
	}
	return nil
}

// TransparentControl returns a Control function for the router's TCP listener with
// Spec.TCPTProxy: SO_MARK mark, as MarkControl, and IP_TRANSPARENT (IPV6_TRANSPARENT on an
// IPv6 socket: one flag of the socket, which a dual-stack listener's IPv4 connections use
// too), without which TPROXY does not hand connections to it, and SO_REUSEADDR (as Go sets
// on every listener): the same function (transparent) as the UDP capture's sockets. It needs
// CAP_NET_ADMIN.
func TransparentControl(mark uint32) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		return transparent(c, strings.HasSuffix(network, "6"), false, mark)
	}
}
