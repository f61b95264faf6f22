package redirect

import (
	"encoding/binary"
	"net/netip"

	"github.com/agentcage/router/windivert/packet"
)

// rewrite sets the source and destination of p, a TCP or UDP packet with ports, to src and
// dst, and brings its checksums up to date: incrementally (RFC 1624 eqn. 3) when they were
// valid before, from scratch otherwise. The address families must match the packet's.
// It allocates nothing.
func rewrite(p packet.Packet, src, dst netip.AddrPort, valid bool) {
	b := p.Bytes()
	ao, al := 12, 8 // the IPv4 source+destination addresses
	if p.IPv6() {
		ao, al = 8, 32
	}
	l4 := p.TransportOffset()
	csum := l4 + 16 // TCP checksum
	if p.IsUDP() {
		csum = l4 + 6
	}
	incremental := valid && !p.IsFragment()
	var oldAddrs, oldAll uint16
	if incremental {
		sa := packet.Sum(0, b[ao:ao+al])
		oldAddrs = packet.Fold(sa)
		oldAll = packet.Fold(packet.Sum(sa, b[l4:l4+4]))
	}
	put(b[ao:ao+al/2], src.Addr())
	put(b[ao+al/2:ao+al], dst.Addr())
	binary.BigEndian.PutUint16(b[l4:], src.Port())
	binary.BigEndian.PutUint16(b[l4+2:], dst.Port())
	if !incremental {
		p.ComputeChecksums()
		return
	}
	sa := packet.Sum(0, b[ao:ao+al])
	newAddrs := packet.Fold(sa)
	newAll := packet.Fold(packet.Sum(sa, b[l4:l4+4]))
	if !p.IPv6() {
		hc := binary.BigEndian.Uint16(b[10:12])
		binary.BigEndian.PutUint16(b[10:12], update(hc, oldAddrs, newAddrs))
	}
	c := binary.BigEndian.Uint16(b[csum:])
	if p.IsUDP() {
		if c == 0 && !p.IPv6() {
			return // IPv4 UDP without a checksum (RFC 768)
		}
		c = update(c, oldAll, newAll)
		if c == 0 {
			c = 0xffff
		}
	} else {
		c = update(c, oldAll, newAll)
	}
	binary.BigEndian.PutUint16(b[csum:], c)
}

// update is RFC 1624 eqn. 3 for data whose one's-complement sum went from old to new.
func update(sum, old, new uint16) uint16 {
	return ^packet.Fold(uint64(^sum) + uint64(^old) + uint64(new))
}

// put writes a into b (4 or 16 bytes); a has the family of b.
func put(b []byte, a netip.Addr) {
	if len(b) == 4 {
		v := a.Unmap().As4()
		copy(b, v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}

// resetFor returns the RST that answers p (an outbound TCP packet of the app) as if it came
// from the destination: RST+ACK acknowledging a segment without ACK (a SYN), RST with the
// segment's acknowledgment number otherwise (RFC 9293 §3.10.7.1). Nil for a RST.
func resetFor(p packet.Packet) []byte {
	fl := p.TCPFlags()
	if fl&packet.TCPRst != 0 {
		return nil
	}
	s := packet.Spec{
		Src:   netip.AddrPortFrom(p.Dst(), p.DstPort()),
		Dst:   netip.AddrPortFrom(p.Src(), p.SrcPort()),
		Proto: packet.ProtoTCP,
	}
	if fl&packet.TCPAck != 0 {
		s.TCPFlags, s.Seq = packet.TCPRst, p.Ack()
	} else {
		n := uint32(len(p.Payload()))
		if fl&packet.TCPSyn != 0 {
			n++
		}
		if fl&packet.TCPFin != 0 {
			n++
		}
		s.TCPFlags, s.Ack = packet.TCPRst|packet.TCPAck, p.Seq()+n
	}
	b, err := packet.Build(s)
	if err != nil {
		return nil
	}
	return b
}
