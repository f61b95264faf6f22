package daemon

import (
	"io"
	"net"
	"net/netip"
	"syscall"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// Platform is the operating system's part: capture and attribution.
type Platform interface {
	// Env is what the policy needs to know of this machine; it is asked once per load.
	Env() policy.Env
	// Install puts the capture for cfg in place, replacing any earlier one atomically. pol is
	// cfg's compiled decision, for a capture that decides flows itself (Windows); dns is the
	// daemon's DNS server, for a capture that answers DNS itself (Windows).
	Install(cfg *conf.Config, pol *policy.Policy, dns *dns.Server) error
	// Original returns where a redirected connection came from and was going.
	Original(c *net.TCPConn) (src, dst netip.AddrPort, err error)
	// Control returns the socket option function that marks the router's own sockets.
	Control(mark uint32) func(network, address string, c syscall.RawConn) error
	// Owner finds the process of a local flow; nil when the platform cannot.
	Owner() func(c *net.TCPConn, src, dst netip.AddrPort) (proc.Info, error)
	// FromVM tells whether a redirected connection's source entered from a VM network or a
	// VM-facing interface (router.Options.FromVM); nil: only sources inside vm_networks do.
	FromVM() func(src netip.Addr) bool
	// Failed delivers a failure of the capture while it runs (nil: it cannot fail): the
	// daemon then stops and Run returns the error, so a service manager restarts it.
	Failed() <-chan error
	// Close ends the capture's part that lives with the process, first thing at a stop; the
	// guard stays (Linux: nothing to do; Windows: the guard's permits go, then WinDivert).
	Close() error
	// Resolver returns the host's own resolver (ip:port) for [dns] direct_names.
	Resolver() (string, error)
	// Refusals returns what the capture itself refused, by reason, since the process
	// started (Linux: the guard's nftables counters; Windows: the engine's); nil when it
	// counts nothing. The router's and the DNS server's refusals are counted apart.
	Refusals() []refusal.Stat
}

// The optional capabilities of a Platform. The daemon asks for each with a type assertion
// and works without it, as each says; a new capture offers those it can:
//
//   - FDOriginal: the original destination from a bare descriptor, so the router's event
//     loops set flows up without a goroutine each (Linux).
//   - DNSBinder: the address of the UDP DNS socket (default: every address).
//   - UDPSockets: the capture hands UDP to sockets of the router's own (Linux, TPROXY).
//   - UDPRelay: the capture hands UDP to the router itself (Windows, the redirect engine).
//   - OwnPorts (ownports.go): source ports reserved for the router's own connections, which
//     the capture leaves out of its filters (Windows).
//   - CagedSockets: the capture takes some flows only from caged processes' sockets, which
//     are then caged whether or not their owner is found (Linux, the caged sockets' mark).
//   - processLister (status.go): this host's processes, for status's warning of a known
//     hypervisor's process that runs uncaged (Linux).
//
// A Platform with neither UDP capability captures no UDP: caged UDP is refused.

// FDOriginal is a Platform that tells a redirected connection's original destination from
// its bare descriptor (router.Options.OriginalFD), without blocking: the router's event loops
// then set flows up themselves (Linux). Without it every flow takes a goroutine.
type FDOriginal interface {
	OriginalFD(fd int, peer netip.AddrPort) (src, dst netip.AddrPort, err error)
}

// CagedSockets is a Platform whose capture takes some flows only from caged processes'
// sockets (router.Options.CagedSocket): Linux, where the kernel marks them.
type CagedSockets interface {
	CagedSocket() func(src, dst netip.AddrPort) bool
}

// DNSBinder is a Platform that chooses the address of the daemon's UDP DNS socket. Without
// it the socket listens on every address ([::]): the Linux capture redirects the queries of
// VM-facing interfaces to it. The TCP DNS socket always listens on every address (the
// Windows engine reflects DNS over TCP to it with the original destination as source).
type DNSBinder interface {
	UDPDNSHost() string
}

// UDPSockets is a Platform whose capture hands UDP to sockets of the router's own
// (Linux: TPROXY to the transparent sockets on [capture] udp_port).
type UDPSockets interface {
	// ListenUDP opens the capture's UDP sockets for cfg: one reader per socket, the return
	// path of answers, and what to close at a stop (readers and return path included).
	ListenUDP(cfg *conf.Config) ([]router.UDPReader, router.UDPReturn, []io.Closer, error)
	// OwnerUDP finds the process of a local UDP flow (nil when the platform cannot).
	OwnerUDP() func(src, dst netip.AddrPort) (proc.Info, error)
}

// UDPRelay is a Platform whose capture hands UDP to the router itself (Windows:
// the redirect engine, through router.HandleUDP).
type UDPRelay interface {
	// UseRouter gives the capture the router that carries its proxied UDP; it is called
	// before the first Install.
	UseRouter(r *router.Router)
}
