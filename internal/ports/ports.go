// Package ports names, once, the well-known ports the cage decides by: DNS, DNS over TLS
// (and QUIC), and DHCP. The policy, the Linux capture, the Windows capture and the WFP guard
// all read them here, so that a port one path treats specially is the port every path does.
package ports

const (
	// DNS is plain DNS, UDP and TCP: answered by the router's own DNS server.
	DNS uint16 = 53
	// DoT is DNS over TLS (TCP) and DNS over QUIC (UDP): it would carry names past the
	// router's DNS, so only a proxy may take it.
	DoT uint16 = 853
	// HTTPS is HTTPS over TCP and HTTP/3 over QUIC (UDP): caged QUIC is refused where the
	// rules allow by name (its name is sealed; the client falls back to TCP).
	HTTPS uint16 = 443
	// DHCPServer4 and DHCPServer6 are the ports a DHCP client sends to (a guest asking its
	// host for an address); DHCPClient4 and DHCPClient6 the ports the answers come to.
	DHCPServer4 uint16 = 67
	DHCPClient4 uint16 = 68
	DHCPClient6 uint16 = 546
	DHCPServer6 uint16 = 547
)

// DHCPServers are the DHCP server ports (v4, v6): a caged flow may always reach them on
// this host, so that a guest gets its address.
func DHCPServers() []uint16 { return []uint16{DHCPServer4, DHCPServer6} }

// DHCP is every DHCP port, servers' and clients' (v4, v6): the host's own DHCP traffic is
// never captured.
func DHCP() []uint16 { return []uint16{DHCPServer4, DHCPClient4, DHCPClient6, DHCPServer6} }
