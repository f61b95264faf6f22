package packet

import "encoding/binary"

// Sum adds b to the running one's-complement sum acc (RFC 1071) and returns the new,
// unfolded sum. Bytes are taken as big-endian 16-bit words; an odd final byte is padded with
// a zero byte. Sum calls may be chained only when every call but the last covers an even
// number of bytes.
func Sum(acc uint64, b []byte) uint64 {
	// Adding 32-bit big-endian words into a 64-bit accumulator is equivalent to adding the
	// 16-bit words (the carries fold back in Fold): RFC 1071 §2 (B), "byte order independence"
	// and "parallel summation".
	for len(b) >= 32 {
		acc += uint64(binary.BigEndian.Uint32(b[0:])) + uint64(binary.BigEndian.Uint32(b[4:])) +
			uint64(binary.BigEndian.Uint32(b[8:])) + uint64(binary.BigEndian.Uint32(b[12:])) +
			uint64(binary.BigEndian.Uint32(b[16:])) + uint64(binary.BigEndian.Uint32(b[20:])) +
			uint64(binary.BigEndian.Uint32(b[24:])) + uint64(binary.BigEndian.Uint32(b[28:]))
		b = b[32:]
	}
	for len(b) >= 4 {
		acc += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

// Fold folds a running sum to 16 bits (without complementing it).
func Fold(acc uint64) uint16 {
	acc = (acc >> 32) + (acc & 0xffffffff)
	acc = (acc >> 32) + (acc & 0xffffffff)
	acc = (acc >> 16) + (acc & 0xffff)
	acc = (acc >> 16) + (acc & 0xffff)
	acc = (acc >> 16) + (acc & 0xffff)
	return uint16(acc)
}

// Checksum is the Internet checksum of b: the one's complement of the one's-complement sum.
func Checksum(b []byte) uint16 { return ^Fold(Sum(0, b)) }

// pseudoSum is the sum of the TCP/UDP pseudo-header (RFC 9293 §3.1, RFC 8200 §8.1) for a
// transport segment of length n.
func (p Packet) pseudoSum(n int) uint64 {
	var acc uint64
	if p.IPv6() {
		acc = Sum(0, p.b[8:40])
	} else {
		acc = Sum(0, p.b[12:20])
	}
	return acc + uint64(p.proto) + uint64(n)
}

// ComputeChecksums recomputes, from scratch, the IPv4 header checksum and the TCP or UDP
// checksum of p. Fragments keep their transport checksum (it covers the whole datagram).
// A UDP checksum that computes to zero is sent as 0xFFFF (RFC 768). ICMP is left alone.
func (p Packet) ComputeChecksums() {
	if len(p.b) == 0 {
		return
	}
	if !p.IPv6() {
		ihl := int(p.b[0]&0x0f) * 4
		p.b[10], p.b[11] = 0, 0
		binary.BigEndian.PutUint16(p.b[10:12], Checksum(p.b[:ihl]))
	}
	off := p.csumOffset()
	if off == 0 || p.IsFragment() {
		return
	}
	seg := p.b[p.l4:]
	p.b[off], p.b[off+1] = 0, 0
	c := ^Fold(Sum(p.pseudoSum(len(seg)), seg))
	if c == 0 && p.IsUDP() {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(p.b[off:], c)
}

// ChecksumsValid reports whether the IPv4 header checksum and the TCP/UDP checksum of p are
// correct. An IPv4 UDP checksum of zero means "none" and counts as valid (RFC 768); for
// IPv6 it is invalid (RFC 8200 §8.1). Fragments are judged on the IPv4 header only.
func (p Packet) ChecksumsValid() bool {
	if len(p.b) == 0 {
		return false
	}
	if !p.IPv6() {
		ihl := int(p.b[0]&0x0f) * 4
		if Fold(Sum(0, p.b[:ihl])) != 0xffff {
			return false
		}
	}
	off := p.csumOffset()
	if off == 0 || p.IsFragment() {
		return true
	}
	if p.IsUDP() && binary.BigEndian.Uint16(p.b[off:]) == 0 {
		return !p.IPv6()
	}
	seg := p.b[p.l4:]
	return Fold(Sum(p.pseudoSum(len(seg)), seg)) == 0xffff
}

// UpdateChecksum16 returns checksum sum updated for one 16-bit word of the covered data
// changing from old to new, by RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m').
func UpdateChecksum16(sum, old, new uint16) uint16 {
	acc := uint64(^sum) + uint64(^old) + uint64(new)
	return ^Fold(acc)
}

// UpdateChecksum returns checksum sum updated for the covered bytes old changing to new
// (equal, even lengths: addresses, ports), by RFC 1624 eqn. 3.
func UpdateChecksum(sum uint16, old, new []byte) uint16 {
	acc := uint64(^sum)
	for i := 0; i+1 < len(old) && i+1 < len(new); i += 2 {
		acc += uint64(^binary.BigEndian.Uint16(old[i:])) + uint64(binary.BigEndian.Uint16(new[i:]))
	}
	return ^Fold(acc)
}
