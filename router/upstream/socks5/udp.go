package socks5

import (
	"errors"
	"fmt"
	"net/netip"
)

// The header of every datagram relayed by a UDP association (RFC 1928 §7):
//
//	+----+------+------+----------+----------+----------+
//	|RSV | FRAG | ATYP | DST.ADDR | DST.PORT |   DATA   |
//	+----+------+------+----------+----------+----------+
//	| 2  |  1   |  1   | Variable |    2     | Variable |
//	+----+------+------+----------+----------+----------+
//
// From the client to the relay, DST is where the relay sends DATA; from the
// relay to the client, it is where DATA came from.

// MaxUDPHeaderLen is the longest UDP request header: RSV, FRAG, ATYP, a
// length octet, a 255-byte name and the port (RFC 1928 §7, §5).
const MaxUDPHeaderLen = 2 + 1 + 1 + 1 + MaxNameLen + 2

// ErrFragmented is wrapped by [ParseUDPHeader] for a datagram whose FRAG is
// not X'00'. Fragmentation is not implemented, and RFC 1928 §7 says that an
// implementation without it MUST drop such datagrams: callers drop them.
var ErrFragmented = errors.New("fragmented datagram (FRAG not zero) not supported")

// AppendUDPHeader appends the header of a datagram for dst (RFC 1928 §7):
// RSV X'0000', FRAG X'00' (a whole datagram), then dst as ATYP, DST.ADDR and
// DST.PORT, encoded like a request's destination (see [Addr]: a host name
// goes as ATYP DOMAINNAME, unresolved). The payload follows, appended by the
// caller. It returns buf unchanged and an error when dst is not a valid
// address; it allocates only when buf lacks room ([MaxUDPHeaderLen] bytes
// always suffice).
func AppendUDPHeader(buf []byte, dst Addr) ([]byte, error) {
	if err := dst.check(); err != nil {
		return buf, fmt.Errorf("invalid destination: %w", err)
	}
	buf = append(buf, 0x00, 0x00, 0x00)
	return appendAddr(buf, dst), nil
}

// ParseUDPHeader parses the header at the start of datagram b (RFC 1928 §7)
// and returns its address and length n: the payload is b[n:], which may be
// empty. It reads b only, never past the header, and keeps no reference to
// b (a host name is copied).
//
// A non-zero RSV is tolerated, as in [ReadReply]. A datagram with a non-zero
// FRAG is refused with an error wrapping [ErrFragmented], before its address
// is looked at; a header that is cut short, has an unknown ATYP or an empty
// host name is refused with an error that says so. On any error addr is the
// zero Addr and n is 0. An IPv6 address is kept as sent, even when it is
// IPv4-mapped.
func ParseUDPHeader(b []byte) (addr Addr, n int, err error) {
	const head = 2 + 1 + 1 // RSV, FRAG, ATYP
	if len(b) < head {
		return Addr{}, 0, fmt.Errorf("udp header: %d bytes, shorter than its fixed part", len(b))
	}
	if frag := b[2]; frag != 0 {
		return Addr{}, 0, fmt.Errorf("udp header: FRAG 0x%02x: %w", frag, ErrFragmented)
	}
	var alen int // address bytes after ATYP
	switch atyp := b[3]; atyp {
	case AtypIPv4:
		alen = 4
	case AtypIPv6:
		alen = 16
	case AtypDomain:
		if len(b) < head+1 {
			return Addr{}, 0, errors.New("udp header: cut short in the name's length")
		}
		if b[head] == 0 {
			return Addr{}, 0, errors.New("udp header: empty host name")
		}
		alen = 1 + int(b[head])
	default:
		return Addr{}, 0, fmt.Errorf("udp header: address type 0x%02x unknown", atyp)
	}
	n = head + alen + 2
	if len(b) < n {
		return Addr{}, 0, fmt.Errorf("udp header: %d bytes, want %d for its address", len(b), n)
	}
	addr.Port = uint16(b[n-2])<<8 | uint16(b[n-1])
	switch b[3] {
	case AtypIPv4:
		addr.IP = netip.AddrFrom4([4]byte(b[head : head+4]))
	case AtypIPv6:
		addr.IP = netip.AddrFrom16([16]byte(b[head : head+16]))
	case AtypDomain:
		addr.Name = string(b[head+1 : n-2])
	}
	return addr, n, nil
}
