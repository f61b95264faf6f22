package windivert

import (
	"encoding/binary"
	"net/netip"
)

// Address mirrors WINDIVERT_ADDRESS (80 bytes): the metadata that comes with every received
// packet or event and that Send reads to inject one. Its memory layout is the C layout on
// windows/amd64 and windows/386 alike, so a []Address is passed to the DLL as is.
//
// The C struct has bit fields and a union; Address keeps them as raw words and offers
// accessors: Layer, Event and the flag bits; and views of the union, to be read according
// to Layer: Network (NETWORK, NETWORK_FORWARD), Flow (FLOW), Socket (SOCKET), Reflect
// (REFLECT). The zero Address is an inbound NETWORK packet with no checksum claims.
//
// Byte order: in the Flow and Socket views the 16-byte addresses are stored by the driver
// as a little-endian 128-bit integer (an IPv4 address as ::ffff:a.b.c.d), and the ports are
// host order; the accessors convert, see AddrFromWire. Packet bytes themselves are in
// network order.
type Address struct {
	// Timestamp is the QueryPerformanceCounter value when the packet or event was seen.
	Timestamp int64
	bits      uint32 // Layer:8 Event:8 Sniffed:1 Outbound:1 Loopback:1 Impostor:1 IPv6:1 IPChecksum:1 TCPChecksum:1 UDPChecksum:1 Reserved1:8
	reserved2 uint32
	union     [64]byte
}

// AddressSize is sizeof(WINDIVERT_ADDRESS).
const AddressSize = 80

// Bit positions in the second word of WINDIVERT_ADDRESS, least significant bit first, as
// laid out by MSVC and GCC for the bit fields of windivert.h.
const (
	bitSniffed     = 16
	bitOutbound    = 17
	bitLoopback    = 18
	bitImpostor    = 19
	bitIPv6        = 20
	bitIPChecksum  = 21
	bitTCPChecksum = 22
	bitUDPChecksum = 23
)

// Offsets inside the union (add 16 for the offset in Address).
const (
	offIfIdx      = 0  // Network.IfIdx (UINT32)
	offSubIfIdx   = 4  // Network.SubIfIdx (UINT32)
	offEndpointID = 0  // Flow/Socket.EndpointId (UINT64)
	offParentID   = 8  // Flow/Socket.ParentEndpointId (UINT64)
	offProcessID  = 16 // Flow/Socket.ProcessId (UINT32)
	offLocalAddr  = 20 // Flow/Socket.LocalAddr (UINT32[4])
	offRemoteAddr = 36 // Flow/Socket.RemoteAddr (UINT32[4])
	offLocalPort  = 52 // Flow/Socket.LocalPort (UINT16)
	offRemotePort = 54 // Flow/Socket.RemotePort (UINT16)
	offProtocol   = 56 // Flow/Socket.Protocol (UINT8)
	offRTimestamp = 0  // Reflect.Timestamp (INT64)
	offRProcessID = 8  // Reflect.ProcessId (UINT32)
	offRLayer     = 12 // Reflect.Layer (WINDIVERT_LAYER, 4 bytes)
	offRFlags     = 16 // Reflect.Flags (UINT64)
	offRPriority  = 24 // Reflect.Priority (INT16)
)

func (a *Address) bit(n uint) bool { return a.bits&(1<<n) != 0 }

func (a *Address) setBit(n uint, v bool) {
	if v {
		a.bits |= 1 << n
	} else {
		a.bits &^= 1 << n
	}
}

// Bits returns the raw second word (Layer, Event and the flag bits), for logs and tests.
func (a *Address) Bits() uint32 { return a.bits }

// Layer is the layer the packet or event came from.
func (a *Address) Layer() Layer { return Layer(a.bits & 0xff) }

// SetLayer sets Layer.
func (a *Address) SetLayer(l Layer) { a.bits = a.bits&^0xff | uint32(l)&0xff }

// Event is the event (EventNetworkPacket at the NETWORK layers).
func (a *Address) Event() Event { return Event(a.bits >> 8) }

// SetEvent sets Event.
func (a *Address) SetEvent(e Event) { a.bits = a.bits&^0xff00 | uint32(e)<<8 }

// Sniffed reports whether the packet was copied by a SNIFF handle rather than diverted.
func (a *Address) Sniffed() bool { return a.bit(bitSniffed) }

// SetSniffed sets Sniffed.
func (a *Address) SetSniffed(v bool) { a.setBit(bitSniffed, v) }

// Outbound reports the direction. Send injects in this direction, whatever the IPs say.
func (a *Address) Outbound() bool { return a.bit(bitOutbound) }

// SetOutbound sets Outbound.
func (a *Address) SetOutbound(v bool) { a.setBit(bitOutbound, v) }

// Loopback reports a packet from and to this machine (WinDivert reports them as outbound).
func (a *Address) Loopback() bool { return a.bit(bitLoopback) }

// SetLoopback sets Loopback.
func (a *Address) SetLoopback(v bool) { a.setBit(bitLoopback, v) }

// Impostor reports a packet injected by another driver (not by a WinDivert handle of higher
// priority, which the priority rules already skip).
func (a *Address) Impostor() bool { return a.bit(bitImpostor) }

// SetImpostor sets Impostor.
func (a *Address) SetImpostor(v bool) { a.setBit(bitImpostor, v) }

// IPv6 reports an IPv6 packet or event.
func (a *Address) IPv6() bool { return a.bit(bitIPv6) }

// SetIPv6 sets IPv6.
func (a *Address) SetIPv6(v bool) { a.setBit(bitIPv6, v) }

// IPChecksum reports that the IPv4 header checksum is valid. Captured packets either have
// valid checksums or the bit clear (checksum offload).
func (a *Address) IPChecksum() bool { return a.bit(bitIPChecksum) }

// SetIPChecksum sets IPChecksum.
func (a *Address) SetIPChecksum(v bool) { a.setBit(bitIPChecksum, v) }

// TCPChecksum reports that the TCP checksum is valid.
func (a *Address) TCPChecksum() bool { return a.bit(bitTCPChecksum) }

// SetTCPChecksum sets TCPChecksum.
func (a *Address) SetTCPChecksum(v bool) { a.setBit(bitTCPChecksum, v) }

// UDPChecksum reports that the UDP checksum is valid.
func (a *Address) UDPChecksum() bool { return a.bit(bitUDPChecksum) }

// SetUDPChecksum sets UDPChecksum.
func (a *Address) SetUDPChecksum(v bool) { a.setBit(bitUDPChecksum, v) }

// NetworkData is the union view for the NETWORK and NETWORK_FORWARD layers
// (WINDIVERT_DATA_NETWORK). For inbound injection both indexes must be valid: reuse those of
// the captured packet.
type NetworkData struct {
	IfIdx    uint32 // interface index
	SubIfIdx uint32 // sub-interface index
}

// Network reads the union as NETWORK data.
func (a *Address) Network() NetworkData {
	return NetworkData{IfIdx: binary.LittleEndian.Uint32(a.union[offIfIdx:]), SubIfIdx: binary.LittleEndian.Uint32(a.union[offSubIfIdx:])}
}

// SetNetwork writes the union as NETWORK data.
func (a *Address) SetNetwork(d NetworkData) {
	binary.LittleEndian.PutUint32(a.union[offIfIdx:], d.IfIdx)
	binary.LittleEndian.PutUint32(a.union[offSubIfIdx:], d.SubIfIdx)
}

// SocketData is the union view for the FLOW and SOCKET layers (WINDIVERT_DATA_FLOW and
// WINDIVERT_DATA_SOCKET share one layout). Addresses are decoded from the driver's
// little-endian 128-bit form; for an IPv4 flow (Address.IPv6 false) they are plain IPv4
// addresses, for IPv6 they are 16-byte addresses (a v4-mapped one stays mapped). Ports are
// numbers (the driver stores them in host order).
type SocketData struct {
	EndpointID       uint64
	ParentEndpointID uint64
	ProcessID        uint32
	LocalAddr        netip.Addr
	RemoteAddr       netip.Addr
	LocalPort        uint16
	RemotePort       uint16
	Protocol         uint8 // IP protocol: 6 TCP, 17 UDP, ...
}

// FlowData is the FLOW-layer view; it has the SOCKET layout.
type FlowData = SocketData

// Socket reads the union as SOCKET data.
func (a *Address) Socket() SocketData {
	d := SocketData{
		EndpointID:       binary.LittleEndian.Uint64(a.union[offEndpointID:]),
		ParentEndpointID: binary.LittleEndian.Uint64(a.union[offParentID:]),
		ProcessID:        binary.LittleEndian.Uint32(a.union[offProcessID:]),
		LocalAddr:        AddrFromWire([16]byte(a.union[offLocalAddr : offLocalAddr+16])),
		RemoteAddr:       AddrFromWire([16]byte(a.union[offRemoteAddr : offRemoteAddr+16])),
		LocalPort:        binary.LittleEndian.Uint16(a.union[offLocalPort:]),
		RemotePort:       binary.LittleEndian.Uint16(a.union[offRemotePort:]),
		Protocol:         a.union[offProtocol],
	}
	if !a.IPv6() {
		d.LocalAddr, d.RemoteAddr = d.LocalAddr.Unmap(), d.RemoteAddr.Unmap()
	}
	return d
}

// Flow reads the union as FLOW data.
func (a *Address) Flow() FlowData { return a.Socket() }

// SetSocket writes the union as SOCKET (or FLOW) data, encoding the addresses as the driver
// does; it does not touch the IPv6 bit. Meant for fakes and tests: the driver ignores this
// data on Send.
func (a *Address) SetSocket(d SocketData) {
	binary.LittleEndian.PutUint64(a.union[offEndpointID:], d.EndpointID)
	binary.LittleEndian.PutUint64(a.union[offParentID:], d.ParentEndpointID)
	binary.LittleEndian.PutUint32(a.union[offProcessID:], d.ProcessID)
	l, r := AddrToWire(d.LocalAddr), AddrToWire(d.RemoteAddr)
	copy(a.union[offLocalAddr:], l[:])
	copy(a.union[offRemoteAddr:], r[:])
	binary.LittleEndian.PutUint16(a.union[offLocalPort:], d.LocalPort)
	binary.LittleEndian.PutUint16(a.union[offRemotePort:], d.RemotePort)
	a.union[offProtocol] = d.Protocol
}

// SetFlow writes the union as FLOW data.
func (a *Address) SetFlow(d FlowData) { a.SetSocket(d) }

// ReflectData is the union view for the REFLECT layer (WINDIVERT_DATA_REFLECT): who opened
// a WinDivert handle, where and how. The packet of a REFLECT event is the handle's filter
// object.
type ReflectData struct {
	Timestamp int64  // when the handle was opened (QueryPerformanceCounter)
	ProcessID uint32 // the process that owns the handle
	Layer     Layer
	Flags     Flag
	Priority  int16
}

// Reflect reads the union as REFLECT data.
func (a *Address) Reflect() ReflectData {
	return ReflectData{
		Timestamp: int64(binary.LittleEndian.Uint64(a.union[offRTimestamp:])),
		ProcessID: binary.LittleEndian.Uint32(a.union[offRProcessID:]),
		Layer:     Layer(binary.LittleEndian.Uint32(a.union[offRLayer:])),
		Flags:     Flag(binary.LittleEndian.Uint64(a.union[offRFlags:])),
		Priority:  int16(binary.LittleEndian.Uint16(a.union[offRPriority:])),
	}
}

// SetReflect writes the union as REFLECT data (fakes and tests).
func (a *Address) SetReflect(d ReflectData) {
	binary.LittleEndian.PutUint64(a.union[offRTimestamp:], uint64(d.Timestamp))
	binary.LittleEndian.PutUint32(a.union[offRProcessID:], d.ProcessID)
	binary.LittleEndian.PutUint32(a.union[offRLayer:], uint32(d.Layer))
	binary.LittleEndian.PutUint64(a.union[offRFlags:], uint64(d.Flags))
	binary.LittleEndian.PutUint16(a.union[offRPriority:], uint16(d.Priority))
}

// AddrFromWire decodes a FLOW/SOCKET address as stored by the driver: a little-endian
// 128-bit integer whose value is the address (sys/windivert.c windivert_get_ipv4_addr puts
// the host-order IPv4 word in element 0 and 0x0000FFFF in element 1; windivert_get_ipv6_addr
// reverses the 16 network-order bytes). Reversing the 16 bytes gives the network-order
// IPv6 (or IPv4-mapped) address; the result is always a 16-byte address.
func AddrFromWire(w [16]byte) netip.Addr {
	var r [16]byte
	for i := range w {
		r[i] = w[15-i]
	}
	return netip.AddrFrom16(r)
}

// AddrToWire encodes an address the way the driver stores it in FLOW/SOCKET data. IPv4
// addresses become ::ffff:a.b.c.d first; the zero Addr encodes as all zeros.
func AddrToWire(a netip.Addr) [16]byte {
	var w [16]byte
	if !a.IsValid() {
		return w
	}
	b := a.As16()
	for i := range b {
		w[i] = b[15-i]
	}
	return w
}
