package nftcap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// UDPConn is the router's transparent UDP socket of one family, bound to Spec.UDPPort: it
// receives the datagrams TPROXY hands over, each with its original destination. It is safe
// for concurrent use like a net.UDPConn; Close ends blocked reads.
type UDPConn struct {
	c  *net.UDPConn
	v6 bool
}

// ListenUDP opens the transparent socket of network ("udp4" on 0.0.0.0, "udp6" on [::],
// IPv6 only) on port, with IP_TRANSPARENT (IPV6_TRANSPARENT), IP_RECVORIGDSTADDR
// (IPV6_RECVORIGDSTADDR) and SO_MARK mark, so that what the router sends from it is its own
// traffic. It needs CAP_NET_ADMIN.
func ListenUDP(network string, port uint16, mark uint32) (*UDPConn, error) {
	var addr string
	v6 := false
	switch network {
	case "udp4":
		addr = net.JoinHostPort("0.0.0.0", strconv.Itoa(int(port)))
	case "udp6":
		addr, v6 = net.JoinHostPort("::", strconv.Itoa(int(port))), true
	default:
		return nil, fmt.Errorf("listen transparent udp: network %q: want udp4 or udp6", network)
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		return transparent(rc, v6, true, mark)
	}}
	pc, err := lc.ListenPacket(context.Background(), network, addr)
	if err != nil {
		return nil, fmt.Errorf("listen transparent udp %s: %w", addr, err)
	}
	return &UDPConn{c: pc.(*net.UDPConn), v6: v6}, nil
}

// ReadFrom reads one datagram into b and returns its length, its sender and the destination
// it was sent to (from the IP_ORIGDSTADDR control message; IPv4-mapped addresses unmapped).
// A datagram longer than b is cut short.
func (u *UDPConn) ReadFrom(b []byte) (n int, src, dst netip.AddrPort, err error) {
	var oob [128]byte
	n, oobn, _, from, err := u.c.ReadMsgUDPAddrPort(b, oob[:])
	if err != nil {
		return 0, netip.AddrPort{}, netip.AddrPort{}, err
	}
	src = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	dst, err = parseOrigDst(oob[:oobn])
	if err != nil {
		return 0, src, netip.AddrPort{}, fmt.Errorf("datagram from %v: original destination: %w", src, err)
	}
	return n, src, dst, nil
}

// LocalAddr is the socket's address.
func (u *UDPConn) LocalAddr() net.Addr { return u.c.LocalAddr() }

// Close closes the socket.
func (u *UDPConn) Close() error { return u.c.Close() }

// ListenReply opens a UDP socket bound to from, an address that need not be this host's
// (IP_TRANSPARENT), marked with mark: what it sends leaves from the original destination of
// a captured flow, as its answers must. It needs CAP_NET_ADMIN.
func ListenReply(from netip.AddrPort, mark uint32) (*net.UDPConn, error) {
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	network, v6 := "udp4", from.Addr().Is6()
	if v6 {
		network = "udp6"
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		return transparent(rc, v6, false, mark)
	}}
	pc, err := lc.ListenPacket(context.Background(), network, from.String())
	if err != nil {
		return nil, fmt.Errorf("listen transparent udp %s: %w", from, err)
	}
	return pc.(*net.UDPConn), nil
}

// transparent sets IP_TRANSPARENT (or IPV6_TRANSPARENT), SO_REUSEADDR, SO_MARK and, with
// origDst, the request of the original destination on every datagram.
func transparent(rc syscall.RawConn, v6, origDst bool, mark uint32) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		set := func(level, opt, v int, name string) {
			if serr == nil {
				if err := unix.SetsockoptInt(int(fd), level, opt, v); err != nil {
					serr = fmt.Errorf("setsockopt %s: %w", name, err)
				}
			}
		}
		set(unix.SOL_SOCKET, unix.SO_REUSEADDR, 1, "SO_REUSEADDR")
		set(unix.SOL_SOCKET, unix.SO_MARK, int(mark), "SO_MARK")
		if v6 {
			set(unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1, "IPV6_TRANSPARENT")
			if origDst {
				set(unix.SOL_IPV6, unix.IPV6_RECVORIGDSTADDR, 1, "IPV6_RECVORIGDSTADDR")
			}
			return
		}
		set(unix.SOL_IP, unix.IP_TRANSPARENT, 1, "IP_TRANSPARENT")
		if origDst {
			set(unix.SOL_IP, unix.IP_RECVORIGDSTADDR, 1, "IP_RECVORIGDSTADDR")
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// parseOrigDst finds the original destination in a datagram's control messages:
// IP_ORIGDSTADDR (a sockaddr_in) or IPV6_ORIGDSTADDR (a sockaddr_in6).
func parseOrigDst(oob []byte) (netip.AddrPort, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("control messages: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_ORIGDSTADDR ||
			m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_ORIGDSTADDR {
			return parseSockaddr(m.Data)
		}
	}
	return netip.AddrPort{}, errors.New("no IP_ORIGDSTADDR control message (IP_RECVORIGDSTADDR not set?)")
}
