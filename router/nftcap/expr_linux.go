package nftcap

// This file holds the expression helpers the chains are made of: matches, lookups in
// anonymous and named sets, and the interval encoding of prefix sets.

import (
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/internal/ports"
)

func (b *builder) namedPrefixSet(name string, v6 bool, ps []netip.Prefix) *nftables.Set {
	return b.addSet(&nftables.Set{Name: name, KeyType: addrType(v6), Interval: true}, intervalElements(v6, ps))
}

// anonPrefixSet returns a lookup of register 1 in a constant interval set of ps.
func (b *builder) anonPrefixSet(v6 bool, ps []netip.Prefix) expr.Any {
	s := b.addSet(&nftables.Set{Anonymous: true, KeyType: addrType(v6), Interval: true}, intervalElements(v6, ps))
	return &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}
}

// anonSet returns a lookup of register 1 in a constant set of keys.
func (b *builder) anonSet(typ nftables.SetDatatype, keys ...[]byte) expr.Any {
	elems := make([]nftables.SetElement, len(keys))
	for i, k := range keys {
		elems[i] = nftables.SetElement{Key: k}
	}
	s := b.addSet(&nftables.Set{Anonymous: true, KeyType: typ}, elems)
	return &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}
}

func (b *builder) l4protoIn(protos ...byte) []expr.Any {
	keys := make([][]byte, len(protos))
	for i, p := range protos {
		keys[i] = []byte{p}
	}
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, b.anonSet(nftables.TypeInetProto, keys...)}
}

func (b *builder) thDportIn(ports ...uint16) []expr.Any {
	keys := make([][]byte, len(ports))
	for i, p := range ports {
		keys[i] = binary.BigEndian.AppendUint16(nil, p)
	}
	return []expr.Any{thDportLoad(), b.anonSet(nftables.TypeInetService, keys...)}
}

func (b *builder) icmp6TypeIn(types ...byte) []expr.Any {
	keys := make([][]byte, len(types))
	for i, t := range types {
		keys[i] = []byte{t}
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		b.anonSet(nftables.TypeICMP6Type, keys...),
	}
}

func (b *builder) fibDaddrTypeIn(types ...uint32) []expr.Any {
	keys := make([][]byte, len(types))
	for i, t := range types {
		keys[i] = native32(t)
	}
	return []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		b.anonSet(nftables.TypeFIBAddr, keys...),
	}
}

// dnsMatch matches UDP and TCP to the DNS port.
func (b *builder) dnsMatch() []expr.Any {
	return append(b.l4protoIn(unix.IPPROTO_TCP, unix.IPPROTO_UDP), thDport(ports.DNS)...)
}

func addrType(v6 bool) nftables.SetDatatype {
	if v6 {
		return nftables.TypeIP6Addr
	}
	return nftables.TypeIPAddr
}

// intervalElements encodes prefixes the way nft does for an interval set: a start element
// per range and an interval-end element one past its last address (none when the range
// reaches the top of the address space), plus a leading interval-end at the zero address
// when no range starts there. Overlapping and adjacent prefixes are merged.
func intervalElements(v6 bool, ps []netip.Prefix) []nftables.SetElement {
	if len(ps) == 0 {
		return nil
	}
	type span struct{ lo, hi netip.Addr }
	spans := make([]span, 0, len(ps))
	for _, p := range ps {
		p = p.Masked()
		spans = append(spans, span{p.Addr(), netaddr.LastAddr(p)})
	}
	slices.SortFunc(spans, func(a, b span) int { return a.lo.Compare(b.lo) })
	merged := spans[:1]
	for _, s := range spans[1:] {
		last := &merged[len(merged)-1]
		if next := last.hi.Next(); !next.IsValid() || s.lo.Compare(next) <= 0 {
			if s.hi.Compare(last.hi) > 0 {
				last.hi = s.hi
			}
			continue
		}
		merged = append(merged, s)
	}
	zero := netip.IPv4Unspecified()
	if v6 {
		zero = netip.IPv6Unspecified()
	}
	var elems []nftables.SetElement
	if merged[0].lo != zero {
		elems = append(elems, nftables.SetElement{Key: zero.AsSlice(), IntervalEnd: true})
	}
	for _, s := range merged {
		elems = append(elems, nftables.SetElement{Key: s.lo.AsSlice()})
		if end := s.hi.Next(); end.IsValid() {
			elems = append(elems, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return elems
}

// Expression helpers; all load into register 1.

func nfproto(p byte) []expr.Any { return metaEq(expr.MetaKeyNFPROTO, []byte{p}) }

func l4proto(p byte) []expr.Any { return metaEq(expr.MetaKeyL4PROTO, []byte{p}) }

func metaEq(k expr.MetaKey, v []byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: k, Register: 1}, cmpEq(v)}
}

func metaNe(k expr.MetaKey, v []byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: k, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: v}}
}

func cmpEq(v []byte) expr.Any { return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: v} }

func thDportLoad() expr.Any {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
}

func thDport(port uint16) []expr.Any {
	return []expr.Any{thDportLoad(), cmpEq(binary.BigEndian.AppendUint16(nil, port))}
}

// saddr and daddr load the IPv4 or IPv6 source or destination address (after an nfproto
// match).
func saddr(v6 bool) []expr.Any { return addrLoad(v6, false) }
func daddr(v6 bool) []expr.Any { return addrLoad(v6, true) }

func addrLoad(v6, dst bool) []expr.Any {
	off, n := uint32(12), uint32(4) // IPv4 saddr (RFC 791)
	if v6 {
		off, n = 8, 16 // IPv6 saddr (RFC 8200)
	}
	if dst {
		off += n
	}
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}}
}

func saddrIn(s *nftables.Set, v6 bool) []expr.Any { return addrIn(s, v6, false) }
func daddrIn(s *nftables.Set, v6 bool) []expr.Any { return addrIn(s, v6, true) }

func addrIn(s *nftables.Set, v6, dst bool) []expr.Any {
	p := byte(unix.NFPROTO_IPV4)
	if v6 {
		p = unix.NFPROTO_IPV6
	}
	out := append(nfproto(p), addrLoad(v6, dst)...)
	return append(out, &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID})
}

// ctStatusDNAT matches connections whose destination was (set) or was not (!set) NATed.
func ctStatusDNAT(set bool) []expr.Any {
	op := expr.CmpOpEq
	if set {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATUS, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: native32(ipsDstNAT), Xor: native32(0)},
		&expr.Cmp{Op: op, Register: 1, Data: native32(0)},
	}
}

// Conntrack directions (enum ip_conntrack_dir): the flow's first packet went ORIGINAL.
const ctDirReply = 1

// ctDirection matches packets that travel in direction dir of their connection.
func ctDirection(dir byte) []expr.Any {
	return []expr.Any{&expr.Ct{Key: expr.CtKeyDIRECTION, Register: 1}, cmpEq([]byte{dir})}
}

func ctStateIn(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: native32(bits), Xor: native32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: native32(0)},
	}
}

func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.Redir{RegisterProtoMin: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}

func counter() expr.Any { return &expr.Counter{} }

func verdict(k expr.VerdictKind) expr.Any { return &expr.Verdict{Kind: k} }

func jump(chain string) expr.Any { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }

func goTo(chain string) expr.Any { return &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain} }

func native32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// ipsDstNAT is IPS_DST_NAT of enum ip_conntrack_status (include/uapi/linux/netfilter/
// nf_conntrack_common.h): the connection's destination was NATed (our redirect sets it).
const ipsDstNAT = 1 << 5
