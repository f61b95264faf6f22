// Package nflog reads what the kernel logs to an NFLOG group (nftables `log group N`): for
// each packet, the rule's log prefix and the packet's protocol, addresses and ports, taken
// from its first bytes. The router's table logs its refusals this way, a few a second per
// reason (nftcap.Spec.LogGroup), so that status can list the latest refused destinations.
//
// Parse and ParseIP are pure and see bytes a guest chose: they never panic and bound every
// read by the length they were given. The netlink part is Linux only.
package nflog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Packet is one logged packet.
type Packet struct {
	Prefix string    // the rule's log prefix
	At     time.Time // when the kernel logged it; the time it was read when the kernel gave none
	Proto  uint8     // IP protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6, ...)
	Src    netip.AddrPort
	Dst    netip.AddrPort // ports are 0 for protocols without them, and for fragments
}

// Attribute types of an NFULNL_MSG_PACKET message (linux/netfilter/nfnetlink_log.h).
const (
	attrTimestamp = 3
	attrPayload   = 9
	attrPrefix    = 10
)

// nfgenmsgLen is the netfilter header ahead of the attributes: family, version, resource id.
const nfgenmsgLen = 4

// ErrNotIP is returned for a payload that is not an IPv4 or IPv6 packet.
var ErrNotIP = errors.New("not an IP packet")

// Parse reads one packet message's data (the netfilter header, then the attributes). A
// message without a payload or whose payload is not IP is an error.
func Parse(b []byte, now time.Time) (Packet, error) {
	if len(b) < nfgenmsgLen {
		return Packet{}, errors.New("nflog: message shorter than its header")
	}
	var p Packet
	var payload []byte
	for rest := b[nfgenmsgLen:]; len(rest) > 0; {
		if len(rest) < 4 {
			return Packet{}, errors.New("nflog: truncated attribute")
		}
		n := int(binary.NativeEndian.Uint16(rest[0:2]))
		typ := binary.NativeEndian.Uint16(rest[2:4]) & 0x3fff // without NLA_F_NESTED, NLA_F_NET_BYTEORDER
		if n < 4 || n > len(rest) {
			return Packet{}, fmt.Errorf("nflog: attribute %d: bad length %d", typ, n)
		}
		data := rest[4:n]
		switch typ {
		case attrPrefix:
			if i := indexByte(data, 0); i >= 0 {
				data = data[:i]
			}
			p.Prefix = string(data)
		case attrPayload:
			payload = data
		case attrTimestamp:
			if len(data) >= 16 {
				sec := binary.BigEndian.Uint64(data[0:8])
				usec := binary.BigEndian.Uint64(data[8:16])
				if sec < 1<<40 && usec < 1e6 {
					p.At = time.Unix(int64(sec), int64(usec)*1e3)
				}
			}
		}
		// Attributes are aligned to 4 bytes; the last one may end without its padding.
		n = (n + 3) &^ 3
		if n >= len(rest) {
			break
		}
		rest = rest[n:]
	}
	if payload == nil {
		return Packet{}, errors.New("nflog: no payload")
	}
	var err error
	if p.Proto, p.Src, p.Dst, err = ParseIP(payload); err != nil {
		return Packet{}, fmt.Errorf("nflog: payload: %w", err)
	}
	if p.At.IsZero() {
		p.At = now
	}
	return p, nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// ParseIP reads the protocol, addresses and ports of an IP packet's first bytes (the rest
// may be cut off). Ports are read for TCP, UDP, UDP-Lite and SCTP when the header after
// the IP header is there; an IPv6 packet with extension headers gives no ports.
func ParseIP(b []byte) (proto uint8, src, dst netip.AddrPort, err error) {
	if len(b) < 1 {
		return 0, src, dst, ErrNotIP
	}
	var sa, da netip.Addr
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 {
			return 0, src, dst, errors.New("ipv4 header cut off")
		}
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 || ihl > len(b) {
			return 0, src, dst, fmt.Errorf("ipv4 header length %d", ihl)
		}
		proto = b[9]
		sa = netip.AddrFrom4([4]byte(b[12:16]))
		da = netip.AddrFrom4([4]byte(b[16:20]))
		if binary.BigEndian.Uint16(b[6:8])&0x1fff == 0 { // the first fragment (or none)
			l4 = b[ihl:]
		}
	case 6:
		if len(b) < 40 {
			return 0, src, dst, errors.New("ipv6 header cut off")
		}
		proto = b[6]
		sa = netip.AddrFrom16([16]byte(b[8:24]))
		da = netip.AddrFrom16([16]byte(b[24:40]))
		l4 = b[40:]
	default:
		return 0, src, dst, ErrNotIP
	}
	var sp, dp uint16
	switch proto {
	case 6, 17, 132, 136: // TCP, UDP, SCTP, UDP-Lite: ports first
		if len(l4) >= 4 {
			sp, dp = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
		}
	}
	return proto, netip.AddrPortFrom(sa, sp), netip.AddrPortFrom(da, dp), nil
}
