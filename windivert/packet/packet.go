// Package packet reads and rewrites IPv4/IPv6 packets carrying TCP or UDP, in place, without
// allocating: the capture on Windows hands whole IP packets (no link header) to user space,
// and the redirect engine changes addresses, ports and flags and then recomputes checksums.
//
// A Packet is a view over a caller-owned []byte. Parse checks every length before it is used,
// so any input, however hostile, yields either a Packet whose accessors stay inside the slice
// or an error. The package is pure and platform-neutral.
//
// References: RFC 791 (IPv4), RFC 8200 (IPv6 and its extension headers), RFC 9293 (TCP),
// RFC 768 (UDP), RFC 1071 and RFC 1624 (Internet checksum and its incremental update).
package packet

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// IP protocol numbers (IANA "Assigned Internet Protocol Numbers").
const (
	ProtoHopByHop uint8 = 0   // IPv6 Hop-by-Hop Options (RFC 8200 §4.3)
	ProtoICMP     uint8 = 1   // ICMP (RFC 792)
	ProtoTCP      uint8 = 6   // TCP (RFC 9293)
	ProtoUDP      uint8 = 17  // UDP (RFC 768)
	ProtoRouting  uint8 = 43  // IPv6 Routing header (RFC 8200 §4.4)
	ProtoFragment uint8 = 44  // IPv6 Fragment header (RFC 8200 §4.5)
	ProtoESP      uint8 = 50  // Encapsulating Security Payload (RFC 4303); opaque
	ProtoAH       uint8 = 51  // Authentication Header (RFC 4302); length in 4-octet units
	ProtoICMPv6   uint8 = 58  // ICMPv6 (RFC 4443)
	ProtoNoNext   uint8 = 59  // IPv6 No Next Header (RFC 8200 §4.7)
	ProtoDestOpts uint8 = 60  // IPv6 Destination Options (RFC 8200 §4.6)
	ProtoMobility uint8 = 135 // Mobility header (RFC 6275)
	ProtoHIP      uint8 = 139 // Host Identity Protocol (RFC 7401)
	ProtoShim6    uint8 = 140 // Shim6 (RFC 5533)
	ProtoExpTest1 uint8 = 253 // experimentation (RFC 3692), extension-header format (RFC 8200 §4.8)
	ProtoExpTest2 uint8 = 254
	maxExtHeaders       = 32 // more than any sane packet carries; bounds the walk
)

// TCP flags (RFC 9293 §3.1; CWR/ECE from RFC 3168).
const (
	TCPFin uint8 = 0x01
	TCPSyn uint8 = 0x02
	TCPRst uint8 = 0x04
	TCPPsh uint8 = 0x08
	TCPAck uint8 = 0x10
	TCPUrg uint8 = 0x20
	TCPEce uint8 = 0x40
	TCPCwr uint8 = 0x80
)

// Header sizes.
const (
	IPv4MinHeaderLen = 20
	IPv6HeaderLen    = 40
	TCPMinHeaderLen  = 20
	UDPHeaderLen     = 8
)

// Errors returned by Parse. They are sentinel values so that a failed parse allocates nothing.
var (
	ErrTruncated = errors.New("packet: truncated")
	ErrVersion   = errors.New("packet: not IPv4 or IPv6")
	ErrHeader    = errors.New("packet: malformed header")
	ErrFamily    = errors.New("packet: address family does not match the packet")
	ErrNoPorts   = errors.New("packet: no TCP or UDP header")
)

// Packet is a parsed view of one IP packet held in a caller-owned buffer. The zero Packet is
// invalid (Valid reports false) and its accessors return zero values.
//
// The view aliases the buffer: setters write into it, and changes made to the buffer by other
// means are seen by the accessors, except that the offsets found by Parse are not recomputed
// (re-Parse after changing header lengths). A Packet is a small value; copy it freely, but do
// not use it from several goroutines while one of them writes.
type Packet struct {
	b     []byte // exactly the packet: b[:total length]
	l4    int    // offset of the transport header; 0 when there is none
	proto uint8  // transport protocol after IPv6 extension headers (or the IPv4 protocol)
	l4len int    // length of the transport header (TCP data offset, 8 for UDP); 0 if none
	flags uint8  // see flag* below
}

const (
	flagIPv6 uint8 = 1 << iota
	flagFragment
	flagLater // a non-first fragment: no transport header in this packet
)

// Parse parses the IP packet at the start of b. The packet may be followed by other bytes
// (WinDivert's batch receive packs packets back to back); Len tells how many bytes this one
// uses. A TCP or UDP header is required to be whole when the protocol says one is present,
// except in non-first fragments, which carry none.
func Parse(b []byte) (Packet, error) {
	if len(b) < 1 {
		return Packet{}, ErrTruncated
	}
	switch b[0] >> 4 {
	case 4:
		return parse4(b)
	case 6:
		return parse6(b)
	}
	return Packet{}, ErrVersion
}

func parse4(b []byte) (Packet, error) {
	if len(b) < IPv4MinHeaderLen {
		return Packet{}, ErrTruncated
	}
	ihl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:4]))
	if ihl < IPv4MinHeaderLen || total < ihl {
		return Packet{}, ErrHeader
	}
	if total > len(b) {
		return Packet{}, ErrTruncated
	}
	p := Packet{b: b[:total:total], proto: b[9]}
	frag := binary.BigEndian.Uint16(b[6:8])
	if frag&0x3fff != 0 { // MF set or offset non-zero
		p.flags |= flagFragment
		if frag&0x1fff != 0 {
			p.flags |= flagLater
			return p, nil
		}
	}
	return p.parseL4(ihl)
}

func parse6(b []byte) (Packet, error) {
	if len(b) < IPv6HeaderLen {
		return Packet{}, ErrTruncated
	}
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	if plen == 0 {
		// A jumbogram (RFC 2675) or an empty payload with a Hop-by-Hop jumbo option: neither
		// occurs on the paths we divert; refuse rather than guess the length.
		return Packet{}, ErrHeader
	}
	total := IPv6HeaderLen + plen
	if total > len(b) {
		return Packet{}, ErrTruncated
	}
	p := Packet{b: b[:total:total], flags: flagIPv6}
	next := b[6]
	off := IPv6HeaderLen
	for i := 0; ; i++ {
		if i == maxExtHeaders {
			return Packet{}, ErrHeader
		}
		switch next {
		case ProtoHopByHop, ProtoRouting, ProtoDestOpts, ProtoMobility, ProtoHIP, ProtoShim6,
			ProtoExpTest1, ProtoExpTest2:
			if next == ProtoHopByHop && i != 0 {
				return Packet{}, ErrHeader // RFC 8200 §4.3: only right after the IPv6 header
			}
			if off+8 > total {
				return Packet{}, ErrTruncated
			}
			n := (int(p.b[off+1]) + 1) * 8
			if off+n > total {
				return Packet{}, ErrTruncated
			}
			next = p.b[off]
			off += n
		case ProtoAH:
			if off+8 > total {
				return Packet{}, ErrTruncated
			}
			n := (int(p.b[off+1]) + 2) * 4
			if off+n > total {
				return Packet{}, ErrTruncated
			}
			next = p.b[off]
			off += n
		case ProtoFragment:
			if off+8 > total {
				return Packet{}, ErrTruncated
			}
			fo := binary.BigEndian.Uint16(p.b[off+2 : off+4])
			next = p.b[off]
			off += 8
			if fo&0xfff9 != 0 { // offset or M set; an atomic fragment (RFC 6946) is whole
				p.flags |= flagFragment
			}
			if fo&0xfff8 != 0 {
				p.proto = next
				p.flags |= flagLater
				return p, nil
			}
		default:
			p.proto = next
			return p.parseL4(off)
		}
	}
}

// parseL4 records the transport header at off when it is TCP or UDP.
func (p Packet) parseL4(off int) (Packet, error) {
	rest := len(p.b) - off
	switch p.proto {
	case ProtoTCP:
		if rest < TCPMinHeaderLen {
			return Packet{}, ErrTruncated
		}
		n := int(p.b[off+12]>>4) * 4
		if n < TCPMinHeaderLen {
			return Packet{}, ErrHeader
		}
		if n > rest {
			return Packet{}, ErrTruncated
		}
		p.l4, p.l4len = off, n
	case ProtoUDP:
		if rest < UDPHeaderLen {
			return Packet{}, ErrTruncated
		}
		p.l4, p.l4len = off, UDPHeaderLen
	default:
		p.l4 = off // other protocols: remember where the payload starts, no ports
	}
	return p, nil
}

// Valid reports whether p came from a successful Parse.
func (p Packet) Valid() bool { return len(p.b) > 0 }

// Bytes returns the packet: the prefix of the parsed buffer that Parse counted (the IPv4
// total length, or 40 + the IPv6 payload length). It aliases the caller's buffer.
func (p Packet) Bytes() []byte { return p.b }

// Len is the packet length in bytes.
func (p Packet) Len() int { return len(p.b) }

// IPv6 reports whether p is an IPv6 packet.
func (p Packet) IPv6() bool { return p.flags&flagIPv6 != 0 }

// IsFragment reports whether p is a fragment (first or later) of a larger datagram. Checksums
// of the transport layer cannot be computed from a fragment and are left alone.
func (p Packet) IsFragment() bool { return p.flags&flagFragment != 0 }

// Protocol is the transport protocol: the IPv4 protocol field, or the Next Header value that
// ends the IPv6 extension-header chain.
func (p Packet) Protocol() uint8 { return p.proto }

// HasPorts reports whether p has a whole TCP or UDP header.
func (p Packet) HasPorts() bool { return p.l4len != 0 }

// IsTCP reports whether p carries a whole TCP header.
func (p Packet) IsTCP() bool { return p.l4len != 0 && p.proto == ProtoTCP }

// IsUDP reports whether p carries a UDP header.
func (p Packet) IsUDP() bool { return p.l4len != 0 && p.proto == ProtoUDP }

// TransportOffset is the offset of the transport header (or of the upper-layer data for
// protocols other than TCP/UDP), or 0 when the packet is a non-first fragment.
func (p Packet) TransportOffset() int { return p.l4 }

// Payload returns the bytes after the TCP or UDP header (nil without one). It aliases the buffer.
func (p Packet) Payload() []byte {
	if p.l4len == 0 {
		return nil
	}
	return p.b[p.l4+p.l4len:]
}

// ICMP returns the type and code of an ICMP (IPv4) or ICMPv6 message; ok is false for other
// protocols, non-first fragments and messages shorter than their type and code.
func (p Packet) ICMP() (typ, code uint8, ok bool) {
	if (p.proto != ProtoICMP && p.proto != ProtoICMPv6) || p.l4 == 0 || p.flags&flagLater != 0 || len(p.b) < p.l4+2 {
		return 0, 0, false
	}
	if p.IPv6() != (p.proto == ProtoICMPv6) {
		return 0, 0, false // ICMP in IPv6 or ICMPv6 in IPv4: not what either means
	}
	return p.b[p.l4], p.b[p.l4+1], true
}

// Src returns the source address.
func (p Packet) Src() netip.Addr {
	switch {
	case len(p.b) == 0:
		return netip.Addr{}
	case p.IPv6():
		return netip.AddrFrom16([16]byte(p.b[8:24]))
	}
	return netip.AddrFrom4([4]byte(p.b[12:16]))
}

// Dst returns the destination address.
func (p Packet) Dst() netip.Addr {
	switch {
	case len(p.b) == 0:
		return netip.Addr{}
	case p.IPv6():
		return netip.AddrFrom16([16]byte(p.b[24:40]))
	}
	return netip.AddrFrom4([4]byte(p.b[16:20]))
}

// SetSrc writes the source address. An IPv4 packet takes an IPv4 address (an IPv4-mapped IPv6
// address is unmapped first), an IPv6 packet a 16-byte address; anything else is ErrFamily.
// Checksums are not updated: call ComputeChecksums after the last change.
func (p Packet) SetSrc(a netip.Addr) error { return p.setAddr(a, 12, 8) }

// SetDst writes the destination address; see SetSrc.
func (p Packet) SetDst(a netip.Addr) error { return p.setAddr(a, 16, 24) }

func (p Packet) setAddr(a netip.Addr, off4, off6 int) error {
	switch {
	case len(p.b) == 0:
		return ErrFamily
	case p.IPv6():
		if !a.Is6() {
			return ErrFamily
		}
		s := a.As16()
		copy(p.b[off6:off6+16], s[:])
	default:
		a = a.Unmap()
		if !a.Is4() {
			return ErrFamily
		}
		s := a.As4()
		copy(p.b[off4:off4+4], s[:])
	}
	return nil
}

// SwapAddrs exchanges the source and destination addresses (and nothing else).
func (p Packet) SwapAddrs() {
	switch {
	case len(p.b) == 0:
	case p.IPv6():
		var t [16]byte
		copy(t[:], p.b[8:24])
		copy(p.b[8:24], p.b[24:40])
		copy(p.b[24:40], t[:])
	default:
		var t [4]byte
		copy(t[:], p.b[12:16])
		copy(p.b[12:16], p.b[16:20])
		copy(p.b[16:20], t[:])
	}
}

// TTL returns the IPv4 TTL or the IPv6 hop limit.
func (p Packet) TTL() uint8 {
	switch {
	case len(p.b) == 0:
		return 0
	case p.IPv6():
		return p.b[7]
	}
	return p.b[8]
}

// SrcPort returns the TCP/UDP source port, or 0 without a TCP/UDP header.
func (p Packet) SrcPort() uint16 {
	if p.l4len == 0 {
		return 0
	}
	return binary.BigEndian.Uint16(p.b[p.l4:])
}

// DstPort returns the TCP/UDP destination port, or 0 without a TCP/UDP header.
func (p Packet) DstPort() uint16 {
	if p.l4len == 0 {
		return 0
	}
	return binary.BigEndian.Uint16(p.b[p.l4+2:])
}

// SetSrcPort writes the TCP/UDP source port; ErrNoPorts without such a header.
func (p Packet) SetSrcPort(port uint16) error {
	if p.l4len == 0 {
		return ErrNoPorts
	}
	binary.BigEndian.PutUint16(p.b[p.l4:], port)
	return nil
}

// SetDstPort writes the TCP/UDP destination port; ErrNoPorts without such a header.
func (p Packet) SetDstPort(port uint16) error {
	if p.l4len == 0 {
		return ErrNoPorts
	}
	binary.BigEndian.PutUint16(p.b[p.l4+2:], port)
	return nil
}

// SwapPorts exchanges the TCP/UDP source and destination ports; ErrNoPorts without them.
func (p Packet) SwapPorts() error {
	if p.l4len == 0 {
		return ErrNoPorts
	}
	h := p.b[p.l4:]
	h[0], h[1], h[2], h[3] = h[2], h[3], h[0], h[1]
	return nil
}

// TCPFlags returns the TCP flags byte (TCPSyn, TCPAck, ...), or 0 for non-TCP packets.
func (p Packet) TCPFlags() uint8 {
	if !p.IsTCP() {
		return 0
	}
	return p.b[p.l4+13]
}

// SetTCPFlags writes the TCP flags byte; ErrNoPorts for non-TCP packets.
func (p Packet) SetTCPFlags(f uint8) error {
	if !p.IsTCP() {
		return ErrNoPorts
	}
	p.b[p.l4+13] = f
	return nil
}

// Seq returns the TCP sequence number (0 for non-TCP packets).
func (p Packet) Seq() uint32 {
	if !p.IsTCP() {
		return 0
	}
	return binary.BigEndian.Uint32(p.b[p.l4+4:])
}

// Ack returns the TCP acknowledgment number (0 for non-TCP packets).
func (p Packet) Ack() uint32 {
	if !p.IsTCP() {
		return 0
	}
	return binary.BigEndian.Uint32(p.b[p.l4+8:])
}

// IPChecksum returns the IPv4 header checksum field (0 for IPv6, which has none).
func (p Packet) IPChecksum() uint16 {
	if len(p.b) == 0 || p.IPv6() {
		return 0
	}
	return binary.BigEndian.Uint16(p.b[10:12])
}

// TransportChecksum returns the TCP or UDP checksum field (0 without such a header).
func (p Packet) TransportChecksum() uint16 {
	if off := p.csumOffset(); off != 0 {
		return binary.BigEndian.Uint16(p.b[off:])
	}
	return 0
}

// csumOffset is the offset of the TCP/UDP checksum field, or 0.
func (p Packet) csumOffset() int {
	switch {
	case p.IsTCP():
		return p.l4 + 16
	case p.IsUDP():
		return p.l4 + 6
	}
	return 0
}

// SplitBatch calls fn for each packet of a buffer that holds packets back to back (as
// WinDivertRecvEx returns them), in order, and stops at the first error from Parse or fn.
// It returns the number of packets seen.
func SplitBatch(b []byte, fn func(i int, p Packet) error) (int, error) {
	n := 0
	for len(b) > 0 {
		p, err := Parse(b)
		if err != nil {
			return n, err
		}
		if err := fn(n, p); err != nil {
			return n, err
		}
		n++
		b = b[p.Len():]
	}
	return n, nil
}
