package windivert

// Tests against the real WinDivert.dll. They run under Wine on Linux
// (GOOS=windows go test -exec tools/wine-go/go-wine-exec ./windivert/): the helpers of the
// DLL work there, opening a handle does not (no kernel driver).

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/winetest"

	divert "github.com/lysShub/divert-go"

	"github.com/agentcage/router/windivert/packet"
)

// loadTestDLL installs the registry-supplied files into a temporary directory (through the
// pinned installer) and loads the DLL from there.
func loadTestDLL(t *testing.T) (*DLL, string) {
	t.Helper()
	dir := winetest.TempDir(t)
	if err := Install(dir, Files{DLL: divert.DLL.DLL, Sys: divert.DLL.Sys}); err != nil {
		t.Fatalf("install the embedded WinDivert files: %v", err)
	}
	d, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := d.Release(); err != nil {
			t.Errorf("Release: %v", err)
		}
	})
	return d, dir
}

func TestLoad(t *testing.T) {
	t.Run("embedded files carry the pinned hashes", func(t *testing.T) {
		if err := (Files{DLL: divert.DLL.DLL, Sys: divert.DLL.Sys}).Verify(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("relative path refused", func(t *testing.T) {
		if _, err := Load("windivert"); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
			t.Errorf("Load(relative) = %v", err)
		}
	})
	t.Run("tampered dll refused", func(t *testing.T) {
		dir := winetest.TempDir(t)
		dll := append([]byte(nil), divert.DLL.DLL...)
		dll[len(dll)-1] ^= 1
		os.WriteFile(filepath.Join(dir, DLLName), dll, 0o644)
		os.WriteFile(filepath.Join(dir, SysName), divert.DLL.Sys, 0o644)
		if _, err := Load(dir); !errors.Is(err, ErrHashMismatch) {
			t.Errorf("Load(tampered dll) = %v, want ErrHashMismatch", err)
		}
	})
	t.Run("missing sys refused", func(t *testing.T) {
		dir := winetest.TempDir(t)
		os.WriteFile(filepath.Join(dir, DLLName), divert.DLL.DLL, 0o644)
		if _, err := Load(dir); err == nil {
			t.Errorf("Load without %s succeeded", SysName)
		}
	})
	t.Run("loaded dll cannot be overwritten", func(t *testing.T) {
		_, dir := loadTestDLL(t)
		err := os.WriteFile(filepath.Join(dir, DLLName), []byte("planted"), 0o644)
		if err == nil {
			t.Errorf("overwriting the loaded DLL succeeded")
		}
	})
}

func TestCompileNamedFilters(t *testing.T) {
	d, _ := loadTestDLL(t)
	for _, nf := range namedFilters() {
		t.Run(nf.name, func(t *testing.T) {
			if err := d.CompileFilter(nf.filter.String(), nf.layer); err != nil {
				t.Errorf("%v", err)
			}
		})
	}
	t.Run("builder forms", func(t *testing.T) {
		p := netip.MustParsePrefix
		for _, f := range []Filter{
			Not(FieldTCPDstPort.EqNum(80)),
			Not(And(FieldIPDstAddr.Eq(IP(netip.MustParseAddr("192.0.2.1"))), FieldTCPDstPort.EqNum(1080))),
			If(FieldTCP.Is(), FieldTCPDstPort.EqNum(80), FieldUDPDstPort.EqNum(53)),
			DstAddr.InAnyPrefix(p("10.0.0.0/8"), p("2001:db8::/32"), p("::/0"), p("192.0.2.7/32")),
			RemoteAddr.InPrefix(p("fd00::/8")),
			FieldTCPDstPort.InRange(8000, 9000),
		} {
			if err := d.CompileFilter(f.String(), LayerNetwork); err != nil {
				t.Errorf("%v", err)
			}
		}
	})
	t.Run("socket exclusions compile at FLOW too", func(t *testing.T) {
		if err := d.CompileFilter(SocketConnects(testExclusions()).String(), LayerFlow); err == nil {
			// event == CONNECT is a SOCKET macro: the DLL must refuse it at FLOW.
			t.Errorf("SOCKET event macro accepted at layer FLOW")
		}
	})
}

func TestCompileRejects(t *testing.T) {
	d, _ := loadTestDLL(t)
	tests := []struct {
		name    string
		filter  string
		layer   Layer
		wantPos int
		wantMsg string
	}{
		{"unknown field", "tcp and bogus == 1", LayerNetwork, 8, ""},
		{"processId at NETWORK", "tcp and processId == 4", LayerNetwork, 8, "layer"},
		{"tcp.DstPort at SOCKET", "tcp.DstPort == 80", LayerSocket, 0, "layer"},
		{"dangling and", "tcp and", LayerNetwork, 7, ""},
		{"not of a group", "not (tcp or udp)", LayerNetwork, 4, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.CompileFilter(tt.filter, tt.layer)
			var fe *FilterError
			if !errors.As(err, &fe) {
				t.Fatalf("CompileFilter(%q) = %v, want *FilterError", tt.filter, err)
			}
			t.Logf("%s", fe)
			if fe.Pos != tt.wantPos {
				t.Errorf("Pos = %d, want %d (%s)", fe.Pos, tt.wantPos, fe.Msg)
			}
			if fe.Msg == "" || !strings.Contains(fe.Msg, tt.wantMsg) {
				t.Errorf("Msg = %q, want it to contain %q", fe.Msg, tt.wantMsg)
			}
		})
	}
}

// fixture is a packet or event with the metadata WinDivert would attach.
type fixture struct {
	name string
	pkt  []byte
	addr Address
}

func netFixture(name string, s packet.Spec, outbound, loopback bool) fixture {
	var a Address
	a.SetLayer(LayerNetwork)
	a.SetOutbound(outbound)
	a.SetLoopback(loopback)
	a.SetIPv6(s.Src.Addr().Is6() && !s.Src.Addr().Is4In6())
	return fixture{name, packet.MustBuild(s), a}
}

// echoFixture is an outbound ICMP message of type typ from 192.0.2.10 to dst.
func echoFixture(name string, typ byte, dst string, loopback bool) fixture {
	b := make([]byte, 28)
	b[0], b[8], b[9] = 0x45, 64, packet.ProtoICMP
	b[3] = 28
	copy(b[12:], netip.MustParseAddr("192.0.2.10").AsSlice())
	copy(b[16:], netip.MustParseAddr(dst).AsSlice())
	b[20] = typ
	var a Address
	a.SetLayer(LayerNetwork)
	a.SetOutbound(true)
	a.SetLoopback(loopback)
	return fixture{name, b, a}
}

func sockFixture(name string, ev Event, proto uint8, pid uint32, local, remote netip.AddrPort, loopback bool) fixture {
	var a Address
	a.SetLayer(LayerSocket)
	a.SetEvent(ev)
	a.SetLoopback(loopback)
	a.SetIPv6(remote.Addr().Is6())
	a.SetSocket(SocketData{ProcessID: pid, LocalAddr: local.Addr(), RemoteAddr: remote.Addr(),
		LocalPort: local.Port(), RemotePort: remote.Port(), Protocol: proto})
	return fixture{name, nil, a}
}

func TestEvalNamedFilters(t *testing.T) {
	d, _ := loadTestDLL(t)
	ap := netip.MustParseAddrPort
	c4, c6 := ap("192.0.2.10:50123"), ap("[2001:db8::10]:50123")
	tcp := func(src, dst netip.AddrPort, fl uint8) packet.Spec {
		return packet.Spec{Src: src, Dst: dst, Proto: packet.ProtoTCP, TCPFlags: fl}
	}
	udp := func(src, dst netip.AddrPort) packet.Spec {
		return packet.Spec{Src: src, Dst: dst, Proto: packet.ProtoUDP, Payload: []byte{0, 1}}
	}
	syn := packet.TCPSyn
	ex := testExclusions()
	tests := []struct {
		filter Filter
		fx     fixture
		want   bool
	}{
		{OutboundSYN(ex), netFixture("v4 syn", tcp(c4, ap("198.51.100.7:443"), syn), true, false), true},
		{OutboundSYN(ex), netFixture("v6 syn", tcp(c6, ap("[2001:db8:1::7]:443"), syn), true, false), true},
		{OutboundSYN(ex), netFixture("loopback syn", tcp(ap("127.0.0.1:50000"), ap("127.0.0.1:47831"), syn), true, true), false},
		{OutboundSYN(ex), netFixture("host-own address is loopback", tcp(c4, ap("192.0.2.10:47831"), syn), true, true), false},
		{OutboundSYN(ex), netFixture("inbound syn", tcp(ap("198.51.100.7:443"), c4, syn), false, false), false},
		{OutboundSYN(ex), netFixture("syn-ack", tcp(c4, ap("198.51.100.7:443"), syn|packet.TCPAck), true, false), false},
		{OutboundSYN(ex), netFixture("plain ack", tcp(c4, ap("198.51.100.7:443"), packet.TCPAck), true, false), false},
		{OutboundSYN(ex), netFixture("v4 link-local", tcp(c4, ap("169.254.10.1:80"), syn), true, false), false},
		{OutboundSYN(ex), netFixture("v6 link-local", tcp(ap("[fe80::2]:5000"), ap("[fe80::1]:80"), syn), true, false), false},
		{OutboundSYN(ex), netFixture("upstream proxy", tcp(c4, ap("198.51.100.1:1080"), syn), true, false), false},
		{OutboundSYN(ex), netFixture("proxy host other port", tcp(c4, ap("198.51.100.1:443"), syn), true, false), true},
		{OutboundSYN(ex), netFixture("v6 upstream proxy", tcp(c6, ap("[2001:db8::1]:1080"), syn), true, false), false},
		{OutboundSYN(ex), netFixture("own source port range", tcp(ap("192.0.2.10:60500"), ap("198.51.100.7:443"), syn), true, false), false},
		{OutboundSYN(ex), netFixture("source port above range", tcp(ap("192.0.2.10:61000"), ap("198.51.100.7:443"), syn), true, false), true},
		{OutboundSYN(ex), netFixture("udp", udp(c4, ap("198.51.100.7:443")), true, false), false},
		{OutboundTCP(ex), netFixture("outbound ack", tcp(c4, ap("198.51.100.7:443"), packet.TCPAck), true, false), true},
		{OutboundTCP(ex), netFixture("listener reply excluded", tcp(ap("192.0.2.10:34010"), ap("198.51.100.7:50123"), packet.TCPAck), true, false), false},
		{OutboundTCP(ex), netFixture("udp not tcp", udp(c4, ap("198.51.100.7:443")), true, false), false},
		{ReflectBack(34010), netFixture("listener syn-ack", tcp(ap("192.0.2.10:34010"), ap("198.51.100.7:50123"), syn|packet.TCPAck), true, false), true},
		{ReflectBack(34010), netFixture("other source port", tcp(ap("192.0.2.10:34011"), ap("198.51.100.7:50123"), packet.TCPAck), true, false), false},
		{ReflectBack(34010), netFixture("listener on loopback", tcp(ap("127.0.0.1:34010"), ap("127.0.0.1:50123"), packet.TCPAck), true, true), false},
		{ListenerGuard(34010), netFixture("lan to listener", tcp(ap("192.0.2.99:40000"), ap("192.0.2.10:34010"), syn), false, false), true},
		{ListenerGuard(34010), netFixture("lan to other port", tcp(ap("192.0.2.99:40000"), ap("192.0.2.10:22"), syn), false, false), false},
		{DNSQueries(ex), netFixture("udp 53", udp(c4, ap("203.0.113.53:53")), true, false), true},
		{DNSQueries(ex), netFixture("tcp 53", tcp(c4, ap("203.0.113.53:53"), syn), true, false), true},
		{DNSQueries(ex), netFixture("v6 link-local resolver", udp(ap("[fe80::2]:5353"), ap("[fe80::1]:53")), true, false), true},
		{DNSQueries(ex), netFixture("udp 54", udp(c4, ap("203.0.113.53:54")), true, false), false},
		{DNSQueries(ex), netFixture("loopback resolver", udp(ap("127.0.0.1:5000"), ap("127.0.0.1:53")), true, true), false},
		{DNSQueries(ex), netFixture("inbound answer", udp(ap("203.0.113.53:53"), c4), false, false), false},
		{SocketConnects(ex), sockFixture("connect", EventSocketConnect, packet.ProtoTCP, 1000, c4, ap("198.51.100.7:443"), false), true},
		{SocketConnects(ex), sockFixture("v6 udp connect", EventSocketConnect, packet.ProtoUDP, 1000, c6, ap("[2001:db8:1::7]:443"), false), true},
		{SocketConnects(ex), sockFixture("close", EventSocketClose, packet.ProtoTCP, 1000, c4, ap("198.51.100.7:443"), false), true},
		{SocketConnects(ex), sockFixture("own pid", EventSocketConnect, packet.ProtoTCP, 4242, c4, ap("198.51.100.7:443"), false), false},
		{SocketConnects(ex), sockFixture("bind", EventSocketBind, packet.ProtoTCP, 1000, c4, ap("0.0.0.0:0"), false), false},
		{SocketConnects(ex), sockFixture("loopback", EventSocketConnect, packet.ProtoTCP, 1000, ap("127.0.0.1:5000"), ap("127.0.0.1:47831"), true), false},
		{SocketConnects(ex), sockFixture("to upstream", EventSocketConnect, packet.ProtoTCP, 1000, c4, ap("198.51.100.1:1080"), false), false},
		{SocketConnects(ex), sockFixture("icmp", EventSocketConnect, packet.ProtoICMP, 1000, c4, ap("198.51.100.7:0"), false), true},
		{EchoRequests(ex), echoFixture("echo request", 8, "198.51.100.7", false), true},
		{EchoRequests(ex), echoFixture("echo reply", 0, "198.51.100.7", false), false},
		{EchoRequests(ex), echoFixture("echo request to loopback", 8, "127.0.0.1", true), false},
		{EchoRequests(ex), echoFixture("echo request to link-local", 8, "169.254.1.1", false), false},
	}
	for _, tt := range tests {
		t.Run(tt.fx.name, func(t *testing.T) {
			a := tt.fx.addr
			got, err := d.EvalFilter(tt.filter.String(), tt.fx.pkt, &a)
			if err != nil {
				t.Fatalf("EvalFilter(%s): %v", tt.filter, err)
			}
			if got != tt.want {
				t.Errorf("EvalFilter(%s) = %v, want %v", tt.filter, got, tt.want)
			}
		})
	}
}

// TestNotIsExactNegation checks the rendering rules of Not against the DLL: for every
// fixture, f and Not(f) evaluate to opposite values, also when f tests a header the packet
// lacks (where WinDivert's own "not" would give false).
func TestNotIsExactNegation(t *testing.T) {
	d, _ := loadTestDLL(t)
	ap := netip.MustParseAddrPort
	fixtures := []fixture{
		netFixture("v4 tcp", packet.Spec{Src: ap("192.0.2.1:1000"), Dst: ap("198.51.100.1:80"), Proto: packet.ProtoTCP, TCPFlags: packet.TCPSyn}, true, false),
		netFixture("v4 udp", packet.Spec{Src: ap("192.0.2.1:1000"), Dst: ap("198.51.100.1:53"), Proto: packet.ProtoUDP}, true, false),
		netFixture("v6 tcp", packet.Spec{Src: ap("[2001:db8::1]:1000"), Dst: ap("[2001:db8::2]:1080"), Proto: packet.ProtoTCP}, false, false),
	}
	fs := []Filter{
		FieldTCPDstPort.EqNum(80),
		FieldTCPSyn.Is(),
		FieldUDPDstPort.Cmp(OpLt, Num(100)),
		And(DstAddr.Eq(netip.MustParseAddr("198.51.100.1")), FieldTCPDstPort.EqNum(80)),
		Or(FieldTCP.Is(), FieldOutbound.Is()),
		And(FieldRemotePort.EqNum(1080), FieldLocalPort.EqNum(1000)),
		DstAddr.InPrefix(netip.MustParsePrefix("2001:db8::/32")),
		RemoteAddr.InPrefix(netip.MustParsePrefix("198.51.100.0/24")),
		Not(FieldLoopback.Is()),
	}
	for _, fx := range fixtures {
		for _, f := range fs {
			a := fx.addr
			pos, err1 := d.EvalFilter(f.String(), fx.pkt, &a)
			neg, err2 := d.EvalFilter(Not(f).String(), fx.pkt, &a)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: %q: %v %v", fx.name, f, err1, err2)
			}
			if pos == neg {
				t.Errorf("%s: %q = %v and %q = %v, want opposite", fx.name, f, pos, Not(f), neg)
			}
		}
	}
}

func TestCalcChecksumsMatchesPacket(t *testing.T) {
	d, _ := loadTestDLL(t)
	ap := netip.MustParseAddrPort
	odd := []byte("odd-length payload!")
	specs := []packet.Spec{
		{Src: ap("192.0.2.10:50123"), Dst: ap("198.51.100.7:443"), Proto: packet.ProtoTCP, TCPFlags: packet.TCPSyn, TCPOptions: []byte{2, 4, 5, 0xb4}},
		{Src: ap("192.0.2.10:50123"), Dst: ap("198.51.100.7:443"), Proto: packet.ProtoTCP, TCPFlags: packet.TCPAck | packet.TCPPsh, IPv4Options: []byte{0x94, 4, 0, 0}, Payload: odd},
		{Src: ap("192.0.2.10:5353"), Dst: ap("203.0.113.53:53"), Proto: packet.ProtoUDP, Payload: odd},
		{Src: ap("192.0.2.10:5353"), Dst: ap("203.0.113.53:53"), Proto: packet.ProtoUDP, Payload: make([]byte, 1400)},
		{Src: ap("[2001:db8::10]:50123"), Dst: ap("[2001:db8:1::7]:443"), Proto: packet.ProtoTCP, TCPFlags: packet.TCPSyn},
		{Src: ap("[2001:db8::10]:50123"), Dst: ap("[2001:db8:1::7]:443"), Proto: packet.ProtoTCP, TCPFlags: packet.TCPAck, Payload: odd},
		{Src: ap("[2001:db8::10]:5353"), Dst: ap("[2001:db8:1::53]:53"), Proto: packet.ProtoUDP, Payload: odd},
		{Src: ap("[2001:db8::10]:5353"), Dst: ap("[2001:db8:1::53]:53"), Proto: packet.ProtoUDP, ExtHeaders: []uint8{packet.ProtoHopByHop, packet.ProtoDestOpts}, Payload: odd},
		{Src: ap("[2001:db8::10]:50123"), Dst: ap("[2001:db8:1::7]:443"), Proto: packet.ProtoTCP, ExtHeaders: []uint8{packet.ProtoDestOpts}, TCPFlags: packet.TCPSyn},
	}
	for i, s := range specs {
		name := s.Src.String() + "->" + s.Dst.String()
		t.Run(name, func(t *testing.T) {
			b := packet.MustBuild(s)
			// Garbage checksums, as after checksum offload or a rewrite.
			p, _ := packet.Parse(b)
			if !p.IPv6() {
				b[10], b[11] = 0xde, 0xad
			}
			off := p.TransportOffset() + 16
			if p.IsUDP() {
				off = p.TransportOffset() + 6
			}
			b[off], b[off+1] = byte(i), 0x5a
			ours := append([]byte(nil), b...)
			theirs := append([]byte(nil), b...)
			q, _ := packet.Parse(ours)
			q.ComputeChecksums()
			var a Address
			a.SetOutbound(true)
			if err := d.CalcChecksums(theirs, &a, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ours, theirs) {
				t.Errorf("checksums differ:\n ours   %x\n WinDivert %x", ours, theirs)
			}
			want := uint32(1) << 17 // Outbound
			if !q.IPv6() {
				want |= 1 << 21
			}
			if q.IsTCP() {
				want |= 1 << 22
			} else {
				want |= 1 << 23
			}
			if a.Bits() != want {
				t.Errorf("address bits after CalcChecksums = %#08x, want %#08x", a.Bits(), want)
			}
		})
	}
	t.Run("ipv4 tcp sets 0x00620000", func(t *testing.T) {
		b := packet.MustBuild(specs[0])
		var a Address
		a.SetOutbound(true)
		if err := d.CalcChecksums(b, &a, 0); err != nil {
			t.Fatal(err)
		}
		if a.Bits() != 0x00620000 {
			t.Errorf("Bits = %#08x, want 0x00620000", a.Bits())
		}
	})
}

func TestOpenWithoutDriver(t *testing.T) {
	// Under Wine there is no kernel driver: WinDivertOpen must fail with a Windows error
	// that Handle reports, and nothing must hang. On a real Windows host run as
	// Administrator the same call succeeds; see docs/windows-checklist.md.
	d, _ := loadTestDLL(t)
	h, err := Open(d, "false", LayerNetwork, 0, FlagSendOnly|FlagNoInstall)
	if err == nil {
		t.Logf("a WinDivert driver is loaded on this host (real Windows): Open succeeded")
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		return
	}
	var we *Error
	if !errors.As(err, &we) {
		t.Fatalf("Open = %v, want *Error", err)
	}
	var en Errno
	if !errors.As(err, &en) {
		t.Errorf("Open error %v does not carry an Errno", err)
	}
	t.Logf("Open without driver: %v", err)
}
