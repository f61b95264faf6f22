package nflog

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

// udp4 is an IPv4 UDP packet 10.0.2.15:5353 -> 224.0.0.251:5353, cut after the ports.
func udp4() []byte {
	b := make([]byte, 24)
	b[0] = 0x45
	b[9] = 17
	copy(b[12:16], []byte{10, 0, 2, 15})
	copy(b[16:20], []byte{224, 0, 0, 251})
	binary.BigEndian.PutUint16(b[20:], 5353)
	binary.BigEndian.PutUint16(b[22:], 5353)
	return b
}

func tcp6() []byte {
	b := make([]byte, 44)
	b[0] = 0x60
	b[6] = 6
	copy(b[8:24], netip.MustParseAddr("fd00::15").AsSlice())
	copy(b[24:40], netip.MustParseAddr("2001:db8::1").AsSlice())
	binary.BigEndian.PutUint16(b[40:], 40000)
	binary.BigEndian.PutUint16(b[42:], 443)
	return b
}

// attr encodes one netlink attribute with its padding.
func attr(typ uint16, data []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func message(attrs ...[]byte) []byte {
	b := []byte{2, 0, 0, 7} // AF_INET, v0, group 7
	for _, a := range attrs {
		b = append(b, a...)
	}
	return b
}

func TestParseIP(t *testing.T) {
	tests := []struct {
		name     string
		b        []byte
		proto    uint8
		src, dst string
		err      bool
	}{
		{"udp4", udp4(), 17, "10.0.2.15:5353", "224.0.0.251:5353", false},
		{"tcp6", tcp6(), 6, "[fd00::15]:40000", "[2001:db8::1]:443", false},
		{"ports cut off", udp4()[:22], 17, "10.0.2.15:0", "224.0.0.251:0", false},
		{"icmp", func() []byte { b := udp4(); b[9] = 1; return b }(), 1, "10.0.2.15:0", "224.0.0.251:0", false},
		{"later fragment", func() []byte { b := udp4(); b[7] = 8; return b }(), 17, "10.0.2.15:0", "224.0.0.251:0", false},
		{"ihl past the end", func() []byte { b := udp4(); b[0] = 0x4f; return b }(), 0, "", "", true},
		{"ihl too small", func() []byte { b := udp4(); b[0] = 0x44; return b }(), 0, "", "", true},
		{"v4 short", udp4()[:19], 0, "", "", true},
		{"v6 short", tcp6()[:39], 0, "", "", true},
		{"not ip", []byte{0x20, 1, 2}, 0, "", "", true},
		{"empty", nil, 0, "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proto, src, dst, err := ParseIP(tt.b)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if tt.err {
				return
			}
			if proto != tt.proto || src.String() != tt.src || dst.String() != tt.dst {
				t.Errorf("= %d %v %v, want %d %s %s", proto, src, dst, tt.proto, tt.src, tt.dst)
			}
		})
	}
}

func TestParse(t *testing.T) {
	now := time.Unix(1000, 0)
	ts := binary.BigEndian.AppendUint64(nil, 1700000000)
	ts = binary.BigEndian.AppendUint64(ts, 250000)
	p, err := Parse(message(
		attr(1, []byte{0x08, 0x00, 1, 0}), // packet header: ignored
		attr(attrPrefix, []byte("guest-udp\x00")),
		attr(attrTimestamp, ts),
		attr(attrPayload|0x8000, udp4()), // the byte-order flag is masked off
	), now)
	if err != nil {
		t.Fatal(err)
	}
	want := Packet{Prefix: "guest-udp", At: time.Unix(1700000000, 250000000), Proto: 17,
		Src: netip.MustParseAddrPort("10.0.2.15:5353"), Dst: netip.MustParseAddrPort("224.0.0.251:5353")}
	if p != want {
		t.Errorf("= %+v, want %+v", p, want)
	}
	// Without a timestamp the packet is dated now; the payload may end unpadded.
	m := message(attr(attrPrefix, []byte("icmp\x00")))
	pl := tcp6()[:41]
	m = append(m, binary.NativeEndian.AppendUint16(nil, uint16(4+len(pl)))...)
	m = append(m, binary.NativeEndian.AppendUint16(nil, attrPayload)...)
	m = append(m, pl...)
	p, err = Parse(m, now)
	if err != nil || p.At != now || p.Prefix != "icmp" || p.Dst.Port() != 0 {
		t.Errorf("= %+v, %v", p, err)
	}
	for name, b := range map[string][]byte{
		"short":        {1, 2},
		"no payload":   message(attr(attrPrefix, []byte("x\x00"))),
		"bad length":   append(message(), 200, 0, 9, 0, 1, 2),
		"length < 4":   append(message(), 2, 0, 9, 0),
		"cut attr":     append(message(), 1, 0),
		"payload junk": message(attr(attrPayload, []byte{0x70, 1})),
	} {
		if _, err := Parse(b, now); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(message(attr(attrPrefix, []byte("guest-udp\x00")), attr(attrPayload, udp4())))
	f.Add(message(attr(attrPayload, tcp6())))
	f.Add(message(attr(attrTimestamp, make([]byte, 16)), attr(attrPayload, []byte{0x45})))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b, time.Unix(1, 0))
		if err != nil {
			return
		}
		if !p.Src.IsValid() || !p.Dst.IsValid() || p.Src.Addr().Is4() != p.Dst.Addr().Is4() {
			t.Fatalf("parsed %+v from %x", p, b)
		}
	})
}
