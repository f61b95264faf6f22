package platform

import (
	"net"
	"net/netip"
	"syscall"

	"github.com/agentcage/router/windivert"
)

// OwnPorts are source ports reserved for the router's own outbound sockets (Windows: a
// runtime port reservation, which lives as long as the process). The capture's filters
// leave them out (windivert.Exclusions.SrcPorts), so the router's connections to its proxy,
// its DNS upstreams and direct destinations never cross user mode, and are its own by
// construction rather than by PID.
type OwnPorts interface {
	// Ranges are the reserved ports, TCP and UDP alike (a filter excludes both).
	Ranges() []windivert.PortRange
	// Reserve makes the socket c (network "tcp*" or "udp*") take its port from the
	// reservation when it is bound; it must be called before the bind.
	Reserve(network string, c syscall.RawConn) error
}

// ownControl is the socket option function of the router's sockets on a platform with
// reserved ports: a socket that dials out of this machine takes a reserved port. A socket
// whose address is unspecified, loopback or one of this machine's is left alone: that is a
// listener binding its own port (Go gives a listener's Control its local address and a
// dialer's the remote one), or a dial to this machine, which no capture takes.
func ownControl(ports OwnPorts, host func(netip.Addr) bool, warn func(error)) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		h, _, err := net.SplitHostPort(address)
		if err != nil {
			return nil
		}
		a, err := netip.ParseAddr(h)
		if err != nil {
			return nil
		}
		a = a.Unmap().WithZone("")
		if a.IsUnspecified() || a.IsLoopback() || host != nil && host(a) {
			return nil
		}
		if err := ports.Reserve(network, c); err != nil && warn != nil {
			warn(err) // the socket goes out on an ordinary port: still told by the router's PID
		}
		return nil
	}
}
