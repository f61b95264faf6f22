package windivert

import (
	"net/netip"

	"github.com/agentcage/router/internal/ports"
)

// The filters of the redirect engine. Every one of them excludes loopback: a packet or
// socket from and to this machine is never captured (reflection does not
// work on loopback, diverting it can deadlock debuggers, and local stays local).
// They are written with fields that exist at the layer they are meant for; the tests compile
// each with the real DLL at that layer.

// PortRange is an inclusive range of ports.
type PortRange struct{ Lo, Hi uint16 }

// Exclusions describe the router's own traffic, which the capture filters must leave alone
// so that the router never captures itself (own traffic is never captured). Each
// exclusion is on the local/remote view of a packet, so one Exclusions value applies at the
// NETWORK and SOCKET layers alike. The zero value excludes nothing.
type Exclusions struct {
	// ListenerPorts are the local TCP ports of the router's transparent listeners. Their
	// outbound packets belong to the reflect-back path (ReflectBack), never to new flows.
	ListenerPorts []uint16
	// SrcPorts are local port ranges reserved for the router's own outbound sockets.
	SrcPorts []PortRange
	// Servers are local TCP endpoints the router serves (the forwards' listen addresses;
	// an unspecified address stands for any): what they send is the router's own answer
	// to a guest, never a new flow of an app.
	Servers []netip.AddrPort
	// Upstreams are endpoints the router dials itself (SOCKS5 proxies, DNS upstreams):
	// packets to them, whatever the source, are not captured. A VM reaching such an
	// endpoint directly still reaches only the proxy.
	Upstreams []netip.AddrPort
	// PIDs are processes whose socket events are ignored (the router's own PID). Packets
	// carry no PID, so this applies at the SOCKET and FLOW layers only.
	PIDs []uint32
	// LocalDsts are destinations the TCP capture (OutboundSYN, OutboundTCP) never takes: the
	// policy's local prefixes (loopback, link-local, multicast, broadcast; see package
	// policy), given by the caller so that this binding holds no policy of its own. DNS
	// capture does not exclude them: a resolver on a link-local address would otherwise be
	// a leak path.
	LocalDsts []netip.Prefix
}

// Filter returns the conjunction of the packet-level exclusions (no PID tests): true for
// a packet or socket event that is none of the router's own.
func (ex Exclusions) Filter() Filter { return ex.filter() }

// filter returns the conjunction of the packet-level exclusions (no PID tests).
func (ex Exclusions) filter() Filter {
	var fs []Filter
	for _, p := range ex.ListenerPorts {
		fs = append(fs, FieldLocalPort.Ne(Num(uint64(p))))
	}
	for _, r := range ex.SrcPorts {
		fs = append(fs, Not(FieldLocalPort.InRange(uint64(r.Lo), uint64(r.Hi))))
	}
	for _, sv := range ex.Servers {
		t := []Filter{FieldTCP.Is(), FieldLocalPort.EqNum(uint64(sv.Port()))}
		if a := sv.Addr().Unmap(); !a.IsUnspecified() {
			t = append(t, FieldLocalAddr.Eq(IP(a)))
		}
		fs = append(fs, Not(And(t...)))
	}
	for _, u := range ex.Upstreams {
		fs = append(fs, Not(And(FieldRemoteAddr.Eq(IP(u.Addr().Unmap())), FieldRemotePort.Eq(Num(uint64(u.Port()))))))
	}
	return And(fs...)
}

func (ex Exclusions) pids() Filter {
	var fs []Filter
	for _, pid := range ex.PIDs {
		fs = append(fs, FieldProcessID.Ne(Num(uint64(pid))))
	}
	return And(fs...)
}

// notLocal is true for packets whose remote address is none of ex.LocalDsts.
func (ex Exclusions) notLocal() Filter {
	if len(ex.LocalDsts) == 0 {
		return And()
	}
	return Not(RemoteAddr.InAnyPrefix(ex.LocalDsts...))
}

func outboundRemote() Filter {
	return And(FieldOutbound.Is(), Not(FieldLoopback.Is()))
}

// OutboundSYN matches, at the NETWORK layer, the first packet of each new outbound TCP
// connection of this host (SYN without ACK, IPv4 and IPv6), except loopback, local
// destinations (ex.LocalDsts) and the router's own traffic. The engine pends each one until its SOCKET
// CONNECT event names the process, then reinjects, drops or reflects it.
func OutboundSYN(ex Exclusions) Filter {
	return And(
		outboundRemote(),
		FieldTCPSyn.Is(), FieldTCPAck.EqNum(0),
		ex.notLocal(),
		ex.filter(),
	)
}

// OutboundTCP matches, at the NETWORK layer, every outbound TCP packet of this host except
// loopback, local destinations (ex.LocalDsts) and the router's own traffic: what a handle must see
// to rewrite the later packets of flows it reflected (the filter language cannot name
// "flows we redirected").
func OutboundTCP(ex Exclusions) Filter {
	return And(
		outboundRemote(),
		FieldTCP.Is(),
		ex.notLocal(),
		ex.filter(),
	)
}

// ReflectBack matches, at the NETWORK layer, the outbound packets sent by the router's
// transparent listeners on ports (the listener answering a reflected connection: C:P ->
// D:cp); the engine rewrites them into D:dp -> C:cp and injects them inbound. False for no
// ports.
func ReflectBack(ports ...uint16) Filter {
	return And(outboundRemote(), FieldTCP.Is(), portsOr(FieldTCPSrcPort, ports))
}

// ListenerGuard matches, at the NETWORK layer, inbound non-loopback TCP packets to the
// transparent listeners' ports: opened with FlagDrop at a priority above the reflecting
// handle, it keeps the LAN off the listener (which must bind the wildcard address), while
// the packets the engine injects are not seen by it (a handle sees only packets injected
// at a lower priority than its own). False for no ports.
func ListenerGuard(ports ...uint16) Filter {
	return And(FieldInbound.Is(), Not(FieldLoopback.Is()), FieldTCP.Is(), portsOr(FieldTCPDstPort, ports))
}

func portsOr(f Field, ports []uint16) Filter {
	fs := make([]Filter, 0, len(ports))
	for _, p := range ports {
		fs = append(fs, f.EqNum(uint64(p)))
	}
	return Or(fs...)
}

// DNSQueries matches, at the NETWORK layer, outbound non-loopback DNS over UDP and TCP
// (destination port 53, IPv4 and IPv6, any destination including link-local), except the
// router's own traffic; the engine answers them in-process.
func DNSQueries(ex Exclusions) Filter {
	return And(
		outboundRemote(),
		Or(FieldUDPDstPort.EqNum(uint64(ports.DNS)), FieldTCPDstPort.EqNum(uint64(ports.DNS))),
		ex.filter(),
	)
}

// EchoRequests matches, at the NETWORK layer, outbound non-loopback ICMP and ICMPv6 echo
// requests (type 8 and 128) to destinations other than ex.LocalDsts: the engine passes
// those of this host's own processes and drops the caged ones' (no proxy carries ICMP).
func EchoRequests(ex Exclusions) Filter {
	return And(
		outboundRemote(),
		Or(FieldICMPType.EqNum(8), FieldICMPv6Type.EqNum(128)),
		ex.notLocal(),
	)
}

// SocketConnects matches, at the SOCKET layer, connect() and close() of TCP, UDP and ICMP
// sockets of every process except loopback ones and the excluded PIDs/ports/upstreams. Open it
// with FlagSniff|FlagRecvOnly: without SNIFF the connects would be blocked. The CONNECT
// event is classified before the SYN is sent (ALE_AUTH_CONNECT), and carries the PID.
func SocketConnects(ex Exclusions) Filter {
	return And(
		Or(FieldEvent.Eq(MacroConnect), FieldEvent.Eq(MacroClose)),
		Or(FieldTCP.Is(), FieldUDP.Is(), FieldICMP.Is(), FieldICMPv6.Is()),
		Not(FieldLoopback.Is()),
		ex.pids(),
		ex.filter(),
	)
}
