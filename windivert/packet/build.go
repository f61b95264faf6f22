package packet

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Spec describes a TCP or UDP packet for Build. It exists for tests and for packets the
// engine makes itself (a RST, a DNS answer); it is not on the per-packet fast path.
type Spec struct {
	Src, Dst netip.AddrPort // same family; an IPv4-mapped address counts as IPv4
	Proto    uint8          // ProtoTCP or ProtoUDP
	TCPFlags uint8          // TCPSyn, TCPAck, ...
	Seq, Ack uint32
	Window   uint16 // 0 means 65535
	TTL      uint8  // TTL or hop limit; 0 means 64
	ID       uint16 // IPv4 identification
	// IPv4Options are copied after the IPv4 header; their length must be a multiple of 4 and
	// at most 40.
	IPv4Options []byte
	// TCPOptions are copied after the TCP header; length a multiple of 4, at most 40.
	TCPOptions []byte
	// ExtHeaders lists IPv6 extension headers to put before the transport header, each as
	// its type: ProtoHopByHop, ProtoDestOpts or ProtoRouting (8 bytes, padded with PadN),
	// or ProtoFragment (an atomic fragment: offset 0, M=0).
	ExtHeaders []uint8
	Payload    []byte
}

// Build returns a new packet for s with correct checksums.
func Build(s Spec) ([]byte, error) {
	src, dst := s.Src.Addr().Unmap(), s.Dst.Addr().Unmap()
	v6 := src.Is6()
	if !src.IsValid() || !dst.IsValid() || src.Is6() != dst.Is6() {
		return nil, errors.New("packet: build: source and destination need one address family")
	}
	if s.Proto != ProtoTCP && s.Proto != ProtoUDP {
		return nil, errors.New("packet: build: protocol must be TCP or UDP")
	}
	if len(s.IPv4Options)%4 != 0 || len(s.IPv4Options) > 40 || (v6 && len(s.IPv4Options) > 0) {
		return nil, errors.New("packet: build: bad IPv4 options")
	}
	if len(s.TCPOptions)%4 != 0 || len(s.TCPOptions) > 40 || (s.Proto != ProtoTCP && len(s.TCPOptions) > 0) {
		return nil, errors.New("packet: build: bad TCP options")
	}
	if !v6 && len(s.ExtHeaders) > 0 {
		return nil, errors.New("packet: build: extension headers need IPv6")
	}
	ttl := s.TTL
	if ttl == 0 {
		ttl = 64
	}
	l4len := UDPHeaderLen
	if s.Proto == ProtoTCP {
		l4len = TCPMinHeaderLen + len(s.TCPOptions)
	}
	var ipLen int
	if v6 {
		ipLen = IPv6HeaderLen + 8*len(s.ExtHeaders)
	} else {
		ipLen = IPv4MinHeaderLen + len(s.IPv4Options)
	}
	total := ipLen + l4len + len(s.Payload)
	if (v6 && total-IPv6HeaderLen > 0xffff) || (!v6 && total > 0xffff) {
		return nil, errors.New("packet: build: packet too long")
	}
	b := make([]byte, total)
	if v6 {
		b[0] = 0x60
		binary.BigEndian.PutUint16(b[4:], uint16(total-IPv6HeaderLen))
		b[7] = ttl
		a, d := src.As16(), dst.As16()
		copy(b[8:], a[:])
		copy(b[24:], d[:])
		nh := &b[6]
		off := IPv6HeaderLen
		for i, t := range s.ExtHeaders {
			switch t {
			case ProtoHopByHop, ProtoDestOpts:
				if t == ProtoHopByHop && i != 0 {
					return nil, errors.New("packet: build: hop-by-hop must come first")
				}
				b[off+2], b[off+3] = 1, 4 // PadN option, 4 bytes of padding (RFC 8200 §4.2)
			case ProtoRouting:
				b[off+2] = 253 // routing type reserved for experiments (RFC 4727); segments left 0
			case ProtoFragment:
				binary.BigEndian.PutUint32(b[off+4:], 0x2a2a2a2a) // identification
			default:
				return nil, errors.New("packet: build: unsupported extension header")
			}
			*nh = t
			nh = &b[off]
			off += 8
		}
		*nh = s.Proto
	} else {
		b[0] = 0x40 | uint8(ipLen/4)
		binary.BigEndian.PutUint16(b[2:], uint16(total))
		binary.BigEndian.PutUint16(b[4:], s.ID)
		b[6] = 0x40 // DF
		b[8] = ttl
		b[9] = s.Proto
		a, d := src.As4(), dst.As4()
		copy(b[12:], a[:])
		copy(b[16:], d[:])
		copy(b[IPv4MinHeaderLen:], s.IPv4Options)
	}
	h := b[ipLen:]
	binary.BigEndian.PutUint16(h[0:], s.Src.Port())
	binary.BigEndian.PutUint16(h[2:], s.Dst.Port())
	if s.Proto == ProtoTCP {
		binary.BigEndian.PutUint32(h[4:], s.Seq)
		binary.BigEndian.PutUint32(h[8:], s.Ack)
		h[12] = uint8(l4len/4) << 4
		h[13] = s.TCPFlags
		w := s.Window
		if w == 0 {
			w = 65535
		}
		binary.BigEndian.PutUint16(h[14:], w)
		copy(h[TCPMinHeaderLen:], s.TCPOptions)
	} else {
		binary.BigEndian.PutUint16(h[4:], uint16(l4len+len(s.Payload)))
	}
	copy(h[l4len:], s.Payload)
	p, err := Parse(b)
	if err != nil {
		return nil, err
	}
	p.ComputeChecksums()
	return b, nil
}

// MustBuild is Build for fixtures known to be valid; it panics on error.
func MustBuild(s Spec) []byte {
	b, err := Build(s)
	if err != nil {
		panic(err)
	}
	return b
}
