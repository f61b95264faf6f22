package windivert

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"
)

// cFlow, cReflect and cNetwork restate the C structs of windivert.h field by field; Go lays
// them out like MSVC/GCC do (natural alignment), so their offsets are the C offsets.
type cFlow struct {
	EndpointID       uint64
	ParentEndpointID uint64
	ProcessID        uint32
	LocalAddr        [4]uint32
	RemoteAddr       [4]uint32
	LocalPort        uint16
	RemotePort       uint16
	Protocol         uint8
}

type cReflect struct {
	Timestamp int64
	ProcessID uint32
	Layer     uint32
	Flags     uint64
	Priority  int16
}

type cNetwork struct {
	IfIdx, SubIfIdx uint32
}

func TestAddressLayout(t *testing.T) {
	var a Address
	if got := unsafe.Sizeof(a); got != AddressSize {
		t.Errorf("sizeof(Address) = %d, want %d", got, AddressSize)
	}
	if got := unsafe.Offsetof(a.bits); got != 8 {
		t.Errorf("offset of bit fields = %d, want 8", got)
	}
	if got := unsafe.Offsetof(a.union); got != 16 {
		t.Errorf("offset of union = %d, want 16", got)
	}
	if got := unsafe.Alignof(a); got != 8 && unsafe.Sizeof(uintptr(0)) == 8 {
		t.Errorf("alignof(Address) = %d, want 8", got)
	}
	var f cFlow
	var r cReflect
	var n cNetwork
	tests := []struct {
		name      string
		got, want uintptr
	}{
		{"Network.IfIdx", unsafe.Offsetof(n.IfIdx), offIfIdx},
		{"Network.SubIfIdx", unsafe.Offsetof(n.SubIfIdx), offSubIfIdx},
		{"Flow.EndpointId", unsafe.Offsetof(f.EndpointID), offEndpointID},
		{"Flow.ParentEndpointId", unsafe.Offsetof(f.ParentEndpointID), offParentID},
		{"Flow.ProcessId", unsafe.Offsetof(f.ProcessID), offProcessID},
		{"Flow.LocalAddr", unsafe.Offsetof(f.LocalAddr), offLocalAddr},
		{"Flow.RemoteAddr", unsafe.Offsetof(f.RemoteAddr), offRemoteAddr},
		{"Flow.LocalPort", unsafe.Offsetof(f.LocalPort), offLocalPort},
		{"Flow.RemotePort", unsafe.Offsetof(f.RemotePort), offRemotePort},
		{"Flow.Protocol", unsafe.Offsetof(f.Protocol), offProtocol},
		{"Reflect.Timestamp", unsafe.Offsetof(r.Timestamp), offRTimestamp},
		{"Reflect.ProcessId", unsafe.Offsetof(r.ProcessID), offRProcessID},
		{"Reflect.Layer", unsafe.Offsetof(r.Layer), offRLayer},
		{"Reflect.Flags", unsafe.Offsetof(r.Flags), offRFlags},
		{"Reflect.Priority", unsafe.Offsetof(r.Priority), offRPriority},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: C offset %d, ours %d", tt.name, tt.got, tt.want)
		}
	}
	// Absolute offsets of WINDIVERT_ADDRESS, from windivert.h.
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"IfIdx", 16 + offIfIdx, 16}, {"SubIfIdx", 16 + offSubIfIdx, 20}, {"EndpointId", 16 + offEndpointID, 16},
		{"ParentEndpointId", 16 + offParentID, 24}, {"ProcessId", 16 + offProcessID, 32},
		{"LocalAddr", 16 + offLocalAddr, 36}, {"RemoteAddr", 16 + offRemoteAddr, 52},
		{"LocalPort", 16 + offLocalPort, 68}, {"RemotePort", 16 + offRemotePort, 70},
		{"Protocol", 16 + offProtocol, 72}, {"Reflect.Timestamp", 16 + offRTimestamp, 16},
		{"Reflect.ProcessId", 16 + offRProcessID, 24}, {"Reflect.Layer", 16 + offRLayer, 28},
		{"Reflect.Flags", 16 + offRFlags, 32}, {"Reflect.Priority", 16 + offRPriority, 40},
	} {
		if c.got != c.want {
			t.Errorf("%s: absolute offset %d, the header says %d", c.name, c.got, c.want)
		}
	}
	if unsafe.Sizeof(f) > 64 || unsafe.Sizeof(r) > 64 {
		t.Errorf("union members larger than Reserved3[64]")
	}
}

// raw exposes the 80 bytes of an Address as the driver sees them.
func raw(a *Address) *[AddressSize]byte { return (*[AddressSize]byte)(unsafe.Pointer(a)) }

func TestAddressBits(t *testing.T) {
	t.Run("checksum example 0x00620000", func(t *testing.T) {
		// After WinDivertHelperCalcChecksums on an outbound IPv4/TCP packet the DLL left
		// Bits = 0x00620000 (verified against the real DLL under Wine).
		var a Address
		binary.LittleEndian.PutUint32(raw(&a)[8:], 0x00620000)
		if !a.Outbound() || !a.IPChecksum() || !a.TCPChecksum() {
			t.Errorf("Outbound/IPChecksum/TCPChecksum = %v/%v/%v, want all true", a.Outbound(), a.IPChecksum(), a.TCPChecksum())
		}
		if a.Sniffed() || a.Loopback() || a.Impostor() || a.IPv6() || a.UDPChecksum() || a.Layer() != LayerNetwork || a.Event() != EventNetworkPacket {
			t.Errorf("unexpected bits set: %+v", a)
		}
		var b Address
		b.SetOutbound(true)
		b.SetIPChecksum(true)
		b.SetTCPChecksum(true)
		if got := b.Bits(); got != 0x00620000 {
			t.Errorf("Bits = %#08x, want 0x00620000", got)
		}
	})
	t.Run("each bit", func(t *testing.T) {
		tests := []struct {
			name string
			set  func(*Address, bool)
			get  func(*Address) bool
			bit  uint
		}{
			{"Sniffed", (*Address).SetSniffed, (*Address).Sniffed, 16},
			{"Outbound", (*Address).SetOutbound, (*Address).Outbound, 17},
			{"Loopback", (*Address).SetLoopback, (*Address).Loopback, 18},
			{"Impostor", (*Address).SetImpostor, (*Address).Impostor, 19},
			{"IPv6", (*Address).SetIPv6, (*Address).IPv6, 20},
			{"IPChecksum", (*Address).SetIPChecksum, (*Address).IPChecksum, 21},
			{"TCPChecksum", (*Address).SetTCPChecksum, (*Address).TCPChecksum, 22},
			{"UDPChecksum", (*Address).SetUDPChecksum, (*Address).UDPChecksum, 23},
		}
		for _, tt := range tests {
			var a Address
			a.SetLayer(LayerSocket)
			a.SetEvent(EventSocketClose)
			tt.set(&a, true)
			if got, want := binary.LittleEndian.Uint32(raw(&a)[8:]), uint32(1)<<tt.bit|7<<8|3; got != want {
				t.Errorf("%s: word = %#08x, want %#08x", tt.name, got, want)
			}
			if !tt.get(&a) {
				t.Errorf("%s: get = false after set", tt.name)
			}
			tt.set(&a, false)
			if got := a.Bits(); got != 7<<8|3 {
				t.Errorf("%s: word after clear = %#08x", tt.name, got)
			}
			if a.Layer() != LayerSocket || a.Event() != EventSocketClose {
				t.Errorf("%s: Layer/Event = %v/%v", tt.name, a.Layer(), a.Event())
			}
		}
	})
}

func TestNetworkView(t *testing.T) {
	var a Address
	a.SetNetwork(NetworkData{IfIdx: 0x11223344, SubIfIdx: 7})
	r := raw(&a)
	if got := binary.LittleEndian.Uint32(r[16:]); got != 0x11223344 {
		t.Errorf("IfIdx at offset 16 = %#x", got)
	}
	if got := binary.LittleEndian.Uint32(r[20:]); got != 7 {
		t.Errorf("SubIfIdx at offset 20 = %d", got)
	}
	if got := a.Network(); got != (NetworkData{0x11223344, 7}) {
		t.Errorf("Network() = %+v", got)
	}
}

func TestSocketViewByteOrder(t *testing.T) {
	t.Run("ipv4 as the driver writes it", func(t *testing.T) {
		var a Address
		a.SetLayer(LayerSocket)
		a.SetEvent(EventSocketConnect)
		r := raw(&a)
		binary.LittleEndian.PutUint64(r[16:], 0xAABB)     // EndpointId
		binary.LittleEndian.PutUint64(r[24:], 0xCCDD)     // ParentEndpointId
		binary.LittleEndian.PutUint32(r[32:], 4242)       // ProcessId
		binary.LittleEndian.PutUint32(r[36:], 0x0A00020F) // LocalAddr[0] = 10.0.2.15, host order
		binary.LittleEndian.PutUint32(r[40:], 0x0000FFFF) // LocalAddr[1]
		binary.LittleEndian.PutUint32(r[52:], 0xC6336407) // RemoteAddr[0] = 198.51.100.7
		binary.LittleEndian.PutUint32(r[56:], 0x0000FFFF)
		binary.LittleEndian.PutUint16(r[68:], 50123) // LocalPort, host order
		binary.LittleEndian.PutUint16(r[70:], 443)
		r[72] = 6
		got := a.Socket()
		want := SocketData{EndpointID: 0xAABB, ParentEndpointID: 0xCCDD, ProcessID: 4242,
			LocalAddr: netip.MustParseAddr("10.0.2.15"), RemoteAddr: netip.MustParseAddr("198.51.100.7"),
			LocalPort: 50123, RemotePort: 443, Protocol: 6}
		if got != want {
			t.Errorf("Socket() = %+v\nwant       %+v", got, want)
		}
		if a.Flow() != want {
			t.Errorf("Flow() differs from Socket()")
		}
		var b Address
		b.SetLayer(LayerSocket)
		b.SetEvent(EventSocketConnect)
		b.SetSocket(want)
		if *raw(&b) != *r {
			t.Errorf("SetSocket bytes differ from the driver's:\n got %x\nwant %x", raw(&b)[16:], r[16:])
		}
	})
	t.Run("ipv6 reversed bytes", func(t *testing.T) {
		var a Address
		a.SetIPv6(true)
		v6 := netip.MustParseAddr("2001:db8::1")
		n := v6.As16()
		r := raw(&a)
		for i := 0; i < 16; i++ { // windivert_get_ipv6_addr: addr8[16-i-1] = byteArray16[i]
			r[36+15-i] = n[i]
		}
		if got := a.Socket().LocalAddr; got != v6 {
			t.Errorf("LocalAddr = %v, want %v", got, v6)
		}
		if got := AddrToWire(v6); got != [16]byte(r[36:52]) {
			t.Errorf("AddrToWire = %x, want %x", got, r[36:52])
		}
	})
	t.Run("v4-mapped kept for IPv6 flows", func(t *testing.T) {
		var a Address
		a.SetIPv6(true)
		m := netip.MustParseAddr("::ffff:192.0.2.1")
		a.SetSocket(SocketData{RemoteAddr: m})
		if got := a.Socket().RemoteAddr; got != m {
			t.Errorf("RemoteAddr = %v, want %v", got, m)
		}
	})
	t.Run("round trip", func(t *testing.T) {
		for _, s := range []string{"0.0.0.0", "255.255.255.255", "::", "ffff::1", "fe80::1234:5678"} {
			a := netip.MustParseAddr(s)
			if got := AddrFromWire(AddrToWire(a)); got.Unmap() != a.Unmap() {
				t.Errorf("round trip %v -> %v", a, got)
			}
		}
		if AddrToWire(netip.Addr{}) != ([16]byte{}) {
			t.Errorf("zero Addr should encode as zeros")
		}
	})
}

func TestReflectView(t *testing.T) {
	var a Address
	want := ReflectData{Timestamp: -5, ProcessID: 77, Layer: LayerSocket, Flags: FlagSniff | FlagRecvOnly, Priority: -1234}
	a.SetReflect(want)
	if got := a.Reflect(); got != want {
		t.Errorf("Reflect() = %+v, want %+v", got, want)
	}
	r := raw(&a)
	if got := int16(binary.LittleEndian.Uint16(r[40:])); got != -1234 {
		t.Errorf("Priority at absolute offset 40 = %d", got)
	}
	if got := binary.LittleEndian.Uint64(r[32:]); got != 5 {
		t.Errorf("Flags at absolute offset 32 = %d", got)
	}
}
