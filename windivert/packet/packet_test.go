package packet

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

var (
	c4  = netip.MustParseAddrPort("192.0.2.10:50123")
	d4  = netip.MustParseAddrPort("198.51.100.7:443")
	c6  = netip.MustParseAddrPort("[2001:db8::10]:50123")
	d6  = netip.MustParseAddrPort("[2001:db8:1::7]:443")
	dns = netip.MustParseAddrPort("203.0.113.53:53")
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// refChecksum is a slow, obviously correct RFC 1071 checksum: 16-bit words, end-around carry.
func refChecksum(parts ...[]byte) uint16 {
	var all []byte
	for _, p := range parts {
		all = append(all, p...)
	}
	if len(all)%2 == 1 {
		all = append(all, 0)
	}
	var s uint32
	for i := 0; i < len(all); i += 2 {
		s += uint32(all[i])<<8 | uint32(all[i+1])
		s = (s & 0xffff) + (s >> 16)
	}
	return ^uint16(s)
}

// refTransportChecksum computes the TCP/UDP checksum of an unfragmented packet the slow way.
func refTransportChecksum(t *testing.T, b []byte, l4 int, proto uint8, v6 bool) uint16 {
	t.Helper()
	seg := append([]byte(nil), b[l4:]...)
	switch proto {
	case ProtoTCP:
		seg[16], seg[17] = 0, 0
	case ProtoUDP:
		seg[6], seg[7] = 0, 0
	}
	var ph []byte
	if v6 {
		ph = append(ph, b[8:40]...)
		ph = binary.BigEndian.AppendUint32(ph, uint32(len(seg)))
		ph = append(ph, 0, 0, 0, proto)
	} else {
		ph = append(ph, b[12:20]...)
		ph = append(ph, 0, proto)
		ph = binary.BigEndian.AppendUint16(ph, uint16(len(seg)))
	}
	c := refChecksum(ph, seg)
	if c == 0 && proto == ProtoUDP {
		c = 0xffff
	}
	return c
}

func TestChecksumKnownIPv4Header(t *testing.T) {
	// The worked example of the IPv4 header checksum (checksum field b861).
	h := unhex(t, "4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7")
	if got := Fold(Sum(0, h)); got != 0xffff {
		t.Errorf("sum over header with checksum = %#04x, want 0xffff", got)
	}
	h[10], h[11] = 0, 0
	if got, want := Checksum(h), uint16(0xb861); got != want {
		t.Errorf("Checksum = %#04x, want %#04x", got, want)
	}
}

func TestSumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 200; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if got, want := Checksum(b), refChecksum(b); got != want {
			t.Fatalf("len %d: Checksum = %#04x, want %#04x", n, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		spec      Spec
		wantProto uint8
		wantL4    int
	}{
		{"ipv4 tcp syn", Spec{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPSyn, Seq: 7}, ProtoTCP, 20},
		{"ipv4 options tcp", Spec{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPAck, IPv4Options: []byte{0x94, 4, 0, 0, 1, 1, 1, 0}}, ProtoTCP, 28},
		{"ipv4 udp", Spec{Src: c4, Dst: dns, Proto: ProtoUDP, Payload: []byte("query")}, ProtoUDP, 20},
		{"ipv4 tcp options payload", Spec{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPSyn, TCPOptions: []byte{2, 4, 5, 0xb4}, Payload: []byte{1, 2, 3}}, ProtoTCP, 20},
		{"ipv6 tcp", Spec{Src: c6, Dst: d6, Proto: ProtoTCP, TCPFlags: TCPSyn | TCPEce | TCPCwr}, ProtoTCP, 40},
		{"ipv6 udp", Spec{Src: c6, Dst: d6, Proto: ProtoUDP, Payload: []byte("x")}, ProtoUDP, 40},
		{"ipv6 hbh dst rt frag tcp", Spec{Src: c6, Dst: d6, Proto: ProtoTCP, TCPFlags: TCPSyn,
			ExtHeaders: []uint8{ProtoHopByHop, ProtoDestOpts, ProtoRouting, ProtoFragment}}, ProtoTCP, 72},
		{"ipv6 dstopts udp", Spec{Src: c6, Dst: d6, Proto: ProtoUDP, ExtHeaders: []uint8{ProtoDestOpts}, Payload: []byte("abc")}, ProtoUDP, 48},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := MustBuild(tt.spec)
			b = append(b, 0xde, 0xad) // trailing bytes of a following packet are not ours
			p, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got, want := p.Len(), len(b)-2; got != want {
				t.Errorf("Len = %d, want %d", got, want)
			}
			if got, want := p.IPv6(), tt.spec.Src.Addr().Is6(); got != want {
				t.Errorf("IPv6 = %v, want %v", got, want)
			}
			if got := p.Protocol(); got != tt.wantProto {
				t.Errorf("Protocol = %d, want %d", got, tt.wantProto)
			}
			if got := p.TransportOffset(); got != tt.wantL4 {
				t.Errorf("TransportOffset = %d, want %d", got, tt.wantL4)
			}
			if got, want := p.Src(), tt.spec.Src.Addr(); got != want {
				t.Errorf("Src = %v, want %v", got, want)
			}
			if got, want := p.Dst(), tt.spec.Dst.Addr(); got != want {
				t.Errorf("Dst = %v, want %v", got, want)
			}
			if got, want := p.SrcPort(), tt.spec.Src.Port(); got != want {
				t.Errorf("SrcPort = %d, want %d", got, want)
			}
			if got, want := p.DstPort(), tt.spec.Dst.Port(); got != want {
				t.Errorf("DstPort = %d, want %d", got, want)
			}
			if got, want := p.TCPFlags(), tt.spec.TCPFlags; tt.spec.Proto == ProtoTCP && got != want {
				t.Errorf("TCPFlags = %#x, want %#x", got, want)
			}
			if got, want := p.Seq(), tt.spec.Seq; got != want {
				t.Errorf("Seq = %d, want %d", got, want)
			}
			if got := p.Payload(); !bytes.Equal(got, tt.spec.Payload) {
				t.Errorf("Payload = %x, want %x", got, tt.spec.Payload)
			}
			if got := p.TTL(); got != 64 {
				t.Errorf("TTL = %d, want 64", got)
			}
			if !p.ChecksumsValid() {
				t.Errorf("ChecksumsValid = false after Build")
			}
			if got, want := p.TransportChecksum(), refTransportChecksum(t, p.Bytes(), tt.wantL4, tt.wantProto, p.IPv6()); got != want {
				t.Errorf("TransportChecksum = %#04x, reference %#04x", got, want)
			}
			if !p.IPv6() {
				ihl := int(b[0]&0xf) * 4
				h := append([]byte(nil), b[:ihl]...)
				h[10], h[11] = 0, 0
				if got, want := p.IPChecksum(), refChecksum(h); got != want {
					t.Errorf("IPChecksum = %#04x, reference %#04x", got, want)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	good4 := MustBuild(Spec{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPSyn})
	good6 := MustBuild(Spec{Src: c6, Dst: d6, Proto: ProtoTCP, TCPFlags: TCPSyn})
	mod := func(b []byte, f func(b []byte)) []byte {
		c := append([]byte(nil), b...)
		f(c)
		return c
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"version 5", []byte{0x50, 0, 0, 0}, ErrVersion},
		{"ipv4 short header", good4[:19], ErrTruncated},
		{"ipv4 ihl 4", mod(good4, func(b []byte) { b[0] = 0x44 }), ErrHeader},
		{"ipv4 total < ihl", mod(good4, func(b []byte) { b[3] = 10 }), ErrHeader},
		{"ipv4 total > buffer", good4[:len(good4)-1], ErrTruncated},
		{"ipv4 tcp doff 4", mod(good4, func(b []byte) { b[32] = 0x40 }), ErrHeader},
		{"ipv4 tcp doff beyond", mod(good4, func(b []byte) { b[32] = 0xf0 }), ErrTruncated},
		{"ipv4 tcp cut", mod(good4, func(b []byte) { b[3] = 30 }), ErrTruncated},
		{"ipv4 udp cut", mod(MustBuild(Spec{Src: c4, Dst: dns, Proto: ProtoUDP}), func(b []byte) { b[3] = 27 }), ErrTruncated},
		{"ipv6 short", good6[:39], ErrTruncated},
		{"ipv6 jumbo", mod(good6, func(b []byte) { b[4], b[5] = 0, 0 }), ErrHeader},
		{"ipv6 plen > buffer", good6[:len(good6)-1], ErrTruncated},
		{"ipv6 ext cut", mod(MustBuild(Spec{Src: c6, Dst: d6, Proto: ProtoTCP, ExtHeaders: []uint8{ProtoDestOpts}}), func(b []byte) { b[41] = 9 }), ErrTruncated},
		{"ipv6 hbh not first", mod(MustBuild(Spec{Src: c6, Dst: d6, Proto: ProtoTCP, ExtHeaders: []uint8{ProtoDestOpts, ProtoDestOpts}}), func(b []byte) { b[40] = ProtoHopByHop }), ErrHeader},
		{"ipv6 ext loop", func() []byte {
			b := make([]byte, 40+8*40)
			b[0] = 0x60
			binary.BigEndian.PutUint16(b[4:], 8*40)
			b[6] = ProtoDestOpts
			for i := 0; i < 40; i++ {
				b[40+8*i] = ProtoDestOpts
			}
			return b
		}(), ErrHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.in)
			if !errors.Is(err, tt.want) {
				t.Errorf("Parse error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestFragments(t *testing.T) {
	t.Run("ipv4 later fragment has no ports", func(t *testing.T) {
		b := MustBuild(Spec{Src: c4, Dst: d4, Proto: ProtoUDP, Payload: make([]byte, 16)})
		binary.BigEndian.PutUint16(b[6:], 0x0003) // offset 3*8, no DF
		p, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.HasPorts(); got {
			t.Errorf("HasPorts = true, want false")
		}
		if !p.IsFragment() || p.Protocol() != ProtoUDP || p.TransportOffset() != 0 {
			t.Errorf("fragment=%v proto=%d l4=%d, want true 17 0", p.IsFragment(), p.Protocol(), p.TransportOffset())
		}
		if err := p.SetDstPort(1); !errors.Is(err, ErrNoPorts) {
			t.Errorf("SetDstPort error = %v, want ErrNoPorts", err)
		}
	})
	t.Run("ipv4 first fragment has ports, keeps transport checksum", func(t *testing.T) {
		b := MustBuild(Spec{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPAck, Payload: make([]byte, 16)})
		binary.BigEndian.PutUint16(b[6:], 0x2000) // MF
		p, _ := Parse(b)
		old := p.TransportChecksum()
		p.SetDstPort(80)
		p.ComputeChecksums()
		if !p.HasPorts() || !p.IsFragment() {
			t.Fatalf("HasPorts=%v IsFragment=%v, want true true", p.HasPorts(), p.IsFragment())
		}
		if got := p.TransportChecksum(); got != old {
			t.Errorf("transport checksum changed on a fragment: %#04x -> %#04x", old, got)
		}
	})
	t.Run("ipv6 later fragment", func(t *testing.T) {
		b := MustBuild(Spec{Src: c6, Dst: d6, Proto: ProtoTCP, ExtHeaders: []uint8{ProtoFragment}})
		binary.BigEndian.PutUint16(b[42:], 0x0010) // offset 2
		p, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if p.HasPorts() || !p.IsFragment() || p.Protocol() != ProtoTCP {
			t.Errorf("HasPorts=%v IsFragment=%v proto=%d, want false true 6", p.HasPorts(), p.IsFragment(), p.Protocol())
		}
	})
}

func TestOtherProtocols(t *testing.T) {
	b := MustBuild(Spec{Src: c4, Dst: d4, Proto: ProtoUDP})
	b[9] = ProtoICMP
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.HasPorts() || p.SrcPort() != 0 || p.Payload() != nil || p.TransportOffset() != 20 {
		t.Errorf("ICMP: HasPorts=%v SrcPort=%d Payload=%v l4=%d", p.HasPorts(), p.SrcPort(), p.Payload(), p.TransportOffset())
	}
	e := MustBuild(Spec{Src: c6, Dst: d6, Proto: ProtoUDP})
	e[6] = ProtoESP
	p, err = Parse(e)
	if err != nil || p.Protocol() != ProtoESP || p.HasPorts() {
		t.Errorf("ESP: err=%v proto=%d HasPorts=%v", err, p.Protocol(), p.HasPorts())
	}
}

func TestSetters(t *testing.T) {
	for _, spec := range []Spec{
		{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPSyn},
		{Src: c6, Dst: d6, Proto: ProtoUDP, Payload: []byte("hello"), ExtHeaders: []uint8{ProtoHopByHop}},
	} {
		t.Run(spec.Src.String(), func(t *testing.T) {
			b := MustBuild(spec)
			p, _ := Parse(b)
			var ns, nd netip.Addr
			if p.IPv6() {
				ns, nd = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
			} else {
				ns, nd = netip.MustParseAddr("10.0.2.15"), netip.MustParseAddr("10.0.2.2")
			}
			if err := p.SetSrc(ns); err != nil {
				t.Fatal(err)
			}
			if err := p.SetDst(nd); err != nil {
				t.Fatal(err)
			}
			p.SetSrcPort(1111)
			p.SetDstPort(2222)
			if p.IsTCP() {
				p.SetTCPFlags(TCPSyn | TCPAck)
			}
			p.ComputeChecksums()
			q, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if q.Src() != ns || q.Dst() != nd || q.SrcPort() != 1111 || q.DstPort() != 2222 {
				t.Errorf("got %v:%d -> %v:%d, want %v:1111 -> %v:2222", q.Src(), q.SrcPort(), q.Dst(), q.DstPort(), ns, nd)
			}
			if q.IsTCP() && q.TCPFlags() != TCPSyn|TCPAck {
				t.Errorf("TCPFlags = %#x, want %#x", q.TCPFlags(), TCPSyn|TCPAck)
			}
			if !q.ChecksumsValid() {
				t.Errorf("checksums invalid after ComputeChecksums")
			}
			q.SwapAddrs()
			q.SwapPorts()
			if q.Src() != nd || q.Dst() != ns || q.SrcPort() != 2222 || q.DstPort() != 1111 {
				t.Errorf("after swap got %v:%d -> %v:%d", q.Src(), q.SrcPort(), q.Dst(), q.DstPort())
			}
			// Swapping both ends keeps the pseudo-header sum: checksums stay valid.
			if !q.ChecksumsValid() {
				t.Errorf("checksums invalid after swapping both ends")
			}
		})
	}
	t.Run("family mismatch", func(t *testing.T) {
		p, _ := Parse(MustBuild(Spec{Src: c4, Dst: d4, Proto: ProtoTCP}))
		if err := p.SetSrc(netip.MustParseAddr("2001:db8::1")); !errors.Is(err, ErrFamily) {
			t.Errorf("SetSrc(v6) on v4 = %v, want ErrFamily", err)
		}
		if err := p.SetDst(netip.MustParseAddr("::ffff:10.1.2.3")); err != nil {
			t.Errorf("SetDst(v4-mapped) on v4 = %v, want nil", err)
		}
		if got := p.Dst(); got != netip.MustParseAddr("10.1.2.3") {
			t.Errorf("Dst = %v, want 10.1.2.3", got)
		}
		q, _ := Parse(MustBuild(Spec{Src: c6, Dst: d6, Proto: ProtoTCP}))
		if err := q.SetSrc(netip.MustParseAddr("10.0.0.1")); !errors.Is(err, ErrFamily) {
			t.Errorf("SetSrc(v4) on v6 = %v, want ErrFamily", err)
		}
		var z Packet
		if z.Valid() || z.Src().IsValid() || z.SetSrc(netip.MustParseAddr("10.0.0.1")) == nil {
			t.Errorf("zero Packet should be invalid and refuse writes")
		}
	})
}

func TestUpdateChecksum(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 500; i++ {
		v6 := i%2 == 1
		spec := Spec{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPAck, Payload: make([]byte, r.IntN(64))}
		if v6 {
			spec.Src, spec.Dst = c6, d6
		}
		if i%3 == 0 {
			spec.Proto, spec.TCPFlags = ProtoUDP, 0
		}
		b := MustBuild(spec)
		p, _ := Parse(b)
		oldDst := append([]byte(nil), p.Dst().AsSlice()...)
		var na netip.Addr
		if v6 {
			var a [16]byte
			for j := range a {
				a[j] = byte(r.Uint32())
			}
			na = netip.AddrFrom16(a)
		} else {
			na = netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
		}
		oldPort := p.DstPort()
		newPort := uint16(r.Uint32())
		sum := p.TransportChecksum()
		sum = UpdateChecksum(sum, oldDst, na.AsSlice())
		sum = UpdateChecksum16(sum, oldPort, newPort)
		p.SetDst(na)
		p.SetDstPort(newPort)
		p.ComputeChecksums()
		want := p.TransportChecksum()
		// 0x0000 and 0xffff are the same value in one's complement; UDP maps 0 to 0xffff.
		if sum != want && !(sum^want == 0xffff && (sum == 0 || want == 0)) {
			t.Fatalf("case %d: incremental %#04x, full %#04x", i, sum, want)
		}
	}
}

func TestSplitBatch(t *testing.T) {
	a := MustBuild(Spec{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPSyn})
	b := MustBuild(Spec{Src: c6, Dst: d6, Proto: ProtoUDP, Payload: []byte("xyz")})
	c := MustBuild(Spec{Src: c4, Dst: dns, Proto: ProtoUDP})
	buf := append(append(append([]byte(nil), a...), b...), c...)
	var got []int
	n, err := SplitBatch(buf, func(i int, p Packet) error {
		got = append(got, p.Len())
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("SplitBatch = %d, %v; want 3, nil", n, err)
	}
	if want := []int{len(a), len(b), len(c)}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("lengths = %v, want %v", got, want)
	}
	_, err = SplitBatch(buf[:len(buf)-1], func(int, Packet) error { return nil })
	if !errors.Is(err, ErrTruncated) {
		t.Errorf("truncated batch error = %v, want ErrTruncated", err)
	}
}

func TestNoAllocations(t *testing.T) {
	b4 := MustBuild(Spec{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPSyn, Payload: make([]byte, 100)})
	b6 := MustBuild(Spec{Src: c6, Dst: d6, Proto: ProtoUDP, ExtHeaders: []uint8{ProtoHopByHop}, Payload: make([]byte, 100)})
	n6 := netip.MustParseAddr("fd00::9")
	allocs := testing.AllocsPerRun(100, func() {
		p, _ := Parse(b4)
		p.SwapAddrs()
		p.SetDstPort(p.SrcPort())
		_ = p.Dst()
		p.ComputeChecksums()
		q, _ := Parse(b6)
		q.SetSrc(n6)
		_ = q.Src()
		q.ComputeChecksums()
		_ = q.ChecksumsValid()
	})
	if allocs != 0 {
		t.Errorf("allocations per parse+rewrite+checksum = %v, want 0", allocs)
	}
}

func BenchmarkParseChecksum(b *testing.B) {
	for _, bc := range []struct {
		name string
		pkt  []byte
	}{
		{"ipv4-tcp-syn", MustBuild(Spec{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPSyn, TCPOptions: make([]byte, 20)})},
		{"ipv4-tcp-1460", MustBuild(Spec{Src: c4, Dst: d4, Proto: ProtoTCP, TCPFlags: TCPAck, Payload: make([]byte, 1460)})},
		{"ipv6-udp-1200", MustBuild(Spec{Src: c6, Dst: d6, Proto: ProtoUDP, Payload: make([]byte, 1200)})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.pkt)))
			b.ReportAllocs()
			for b.Loop() {
				p, err := Parse(bc.pkt)
				if err != nil {
					b.Fatal(err)
				}
				p.SwapAddrs()
				p.ComputeChecksums()
			}
		})
	}
}
