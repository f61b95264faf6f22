package packet

import (
	"bytes"
	"net/netip"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse. Properties: no panic; a parsed packet lies inside
// the input; writing back the values read leaves the bytes unchanged (parse/serialize
// consistency); new values written through the setters read back, and nothing else moves;
// after ComputeChecksums the checksums are valid and a re-parse sees the same structure.
func FuzzParse(f *testing.F) {
	for _, s := range []Spec{
		{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPSyn, TCPOptions: []byte{2, 4, 5, 0xb4}},
		{Src: c4, Dst: dns, Proto: ProtoUDP, Payload: []byte("\x12\x34\x01\x00\x00\x01")},
		{Src: c4, Dst: d4, Proto: ProtoTCP, IPv4Options: []byte{0x94, 4, 0, 0}, Payload: []byte("GET /")},
		{Src: c6, Dst: d6, Proto: ProtoTCP, TCPFlags: TCPSyn},
		{Src: c6, Dst: d6, Proto: ProtoUDP, ExtHeaders: []uint8{ProtoHopByHop, ProtoDestOpts, ProtoRouting, ProtoFragment}},
	} {
		f.Add(MustBuild(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := append([]byte(nil), data...)
		p, err := Parse(data)
		if err != nil {
			if p.Valid() {
				t.Fatalf("Parse failed (%v) but returned a valid Packet", err)
			}
			return
		}
		if p.Len() > len(data) || p.Len() == 0 || &p.Bytes()[0] != &data[0] {
			t.Fatalf("packet of %d bytes does not lie at the start of the %d-byte input", p.Len(), len(data))
		}
		if off := p.TransportOffset(); off < 0 || off > p.Len() {
			t.Fatalf("transport offset %d outside packet of %d", off, p.Len())
		}
		if p.HasPorts() && p.TransportOffset()+8 > p.Len() {
			t.Fatalf("ports claimed but header does not fit")
		}
		// Write back what was read: the buffer must not change.
		src, dst, sp, dp, fl := p.Src(), p.Dst(), p.SrcPort(), p.DstPort(), p.TCPFlags()
		_ = p.Payload()
		_, _, _ = p.Seq(), p.Ack(), p.TTL()
		if err := p.SetSrc(src); err != nil {
			t.Fatalf("SetSrc(own source): %v", err)
		}
		if err := p.SetDst(dst); err != nil {
			t.Fatalf("SetDst(own destination): %v", err)
		}
		if p.HasPorts() {
			p.SetSrcPort(sp)
			p.SetDstPort(dp)
		}
		if p.IsTCP() {
			p.SetTCPFlags(fl)
		}
		if !bytes.Equal(data, orig) {
			t.Fatalf("writing back the parsed values changed the packet")
		}
		// Write new values; they read back and the structure stays the same.
		var ns netip.Addr
		if p.IPv6() {
			ns = netip.MustParseAddr("2001:db8::99")
		} else {
			ns = netip.MustParseAddr("192.0.2.99")
		}
		p.SetSrc(ns)
		if p.HasPorts() {
			p.SetDstPort(dp ^ 0xffff)
		}
		p.ComputeChecksums()
		if !p.ChecksumsValid() {
			t.Fatalf("checksums invalid after ComputeChecksums")
		}
		q, err := Parse(data)
		if err != nil {
			t.Fatalf("re-parse after rewrite: %v", err)
		}
		if q.Len() != p.Len() || q.TransportOffset() != p.TransportOffset() || q.Protocol() != p.Protocol() || q.HasPorts() != p.HasPorts() {
			t.Fatalf("structure changed by rewrite: len %d/%d l4 %d/%d proto %d/%d",
				q.Len(), p.Len(), q.TransportOffset(), p.TransportOffset(), q.Protocol(), p.Protocol())
		}
		if q.Src() != ns || q.Dst() != dst {
			t.Fatalf("addresses read back %v -> %v, want %v -> %v", q.Src(), q.Dst(), ns, dst)
		}
		if q.HasPorts() && (q.DstPort() != dp^0xffff || q.SrcPort() != sp) {
			t.Fatalf("ports read back %d -> %d, want %d -> %d", q.SrcPort(), q.DstPort(), sp, dp^0xffff)
		}
		if !bytes.Equal(data[p.Len():], orig[p.Len():]) {
			t.Fatalf("bytes after the packet changed")
		}
	})
}
