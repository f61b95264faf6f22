// Package netaddr is the address arithmetic several packages share: the last address of a
// prefix, the CIDR that a range is, a 128-bit key that orders every address on one axis, and
// the address and port of a net.Addr. It is pure and imports the standard library only (the
// rules package, which must stay pure, depends on it).
package netaddr

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// LastAddr is the highest address of p (p need not be masked; its host bits are set).
func LastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a.WithZone(p.Addr().Zone())
}

// RangePrefix returns the prefix whose addresses are exactly lo..hi, and false when the
// range is not one CIDR block.
func RangePrefix(lo, hi netip.Addr) (netip.Prefix, bool) {
	for bits := 0; bits <= lo.BitLen(); bits++ {
		p := netip.PrefixFrom(lo, bits).Masked()
		if p.Addr() == lo && LastAddr(p) == hi {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// Key orders addresses on one axis: an address's 16 bytes, IPv4 as ::ffff:a.b.c.d. Ports and
// other small numbers fit in Lo.
type Key struct{ Hi, Lo uint64 }

// KeyOf is a's key.
func KeyOf(a netip.Addr) Key {
	b := a.As16()
	return Key{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// Less reports whether k comes before o.
func (k Key) Less(o Key) bool { return k.Hi < o.Hi || k.Hi == o.Hi && k.Lo < o.Lo }

// Compare is -1, 0 or 1 as k is before, at or after o.
func (k Key) Compare(o Key) int {
	switch {
	case k.Less(o):
		return -1
	case o.Less(k):
		return 1
	}
	return 0
}

// Next is the key after k; false at the end of the axis.
func (k Key) Next() (Key, bool) {
	if k.Lo == ^uint64(0) {
		if k.Hi == ^uint64(0) {
			return k, false
		}
		return Key{k.Hi + 1, 0}, true
	}
	return Key{k.Hi, k.Lo + 1}, true
}

// Prev is the key before k; false at the start of the axis.
func (k Key) Prev() (Key, bool) {
	if k.Lo == 0 {
		if k.Hi == 0 {
			return k, false
		}
		return Key{k.Hi - 1, ^uint64(0)}, true
	}
	return Key{k.Hi, k.Lo - 1}, true
}

// AddrPort is the unmapped address and port of a net.Addr: a TCP or UDP address, or any
// other whose String is "ip:port"; the zero AddrPort otherwise (nil included).
func AddrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	case nil:
		return netip.AddrPort{}
	default:
		var err error
		if ap, err = netip.ParseAddrPort(a.String()); err != nil {
			return netip.AddrPort{}
		}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
