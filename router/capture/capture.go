// Package capture is the seam between the daemon and a capture: what an operating system's
// capture (nftables on Linux, package router/nftcap/platform; WinDivert and WFP on Windows,
// package windivert/platform) offers the daemon, and the types both sides speak. It imports
// no capture: the daemon is written against these interfaces, and only the command
// (cmd/router) chooses and constructs a platform.
//
// The path of a caged flow: the capture takes it (a kernel redirect, a diverted packet),
// the router decides it (rules/policy), dials it (direct, through a proxy, or not at all)
// and relays it; see docs/architecture.md.
package capture

import (
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/rules"
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
	Owner() func(c *net.TCPConn, src, dst netip.AddrPort) (rules.Owner, error)
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
//   - CagedSockets: the capture takes some flows only from caged processes' sockets, which
//     are then caged whether or not their owner is found (Linux, the caged sockets' mark).
//   - GuardReporter: the guard's health for status (Linux: restores; Windows: rivals and
//     guarded paths).
//   - KernelCager: the processes the kernel cages, for status, and its warning of a known
//     hypervisor's process that runs uncaged (Linux).
//   - ProfileDecider: the capture decides flows itself and must know the guests' switched
//     profiles (Windows, the redirect engine); without it only the router decides them
//     (Linux: every caged flow reaches the router).
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
	ListenUDP(cfg *conf.Config) ([]UDPReader, UDPReturn, []io.Closer, error)
	// OwnerUDP finds the process of a local UDP flow (nil when the platform cannot).
	OwnerUDP() func(src, dst netip.AddrPort) (rules.Owner, error)
}

// UDPReader is a capture's socket of captured datagrams (Linux: nftcap.UDPConn); the
// router's ServeUDP reads it (router.UDPReader has the same method).
type UDPReader interface {
	// ReadFrom reads one datagram into b: its length, sender and original destination.
	ReadFrom(b []byte) (n int, src, dst netip.AddrPort, err error)
}

// UDPReturn is how a capture sends answers back to its clients (router.UDPReturn has the
// same methods). Its methods are called from the router's goroutines, concurrently.
type UDPReturn interface {
	// Reply sends p to client as if from from, the original destination of one of the
	// client's flows. It must not keep p and must not block for long.
	Reply(client, from netip.AddrPort, p []byte) error
	// Release says that the flow client → from ended: what Reply kept for it may go.
	Release(client, from netip.AddrPort)
}

// Datagram is one captured datagram a UDPRelay capture hands to the router. Its fields are
// router.Datagram's, which the daemon converts it to: the conversion stops compiling when the
// two differ. (The seam does not import the router, so that a capture that relays UDP
// through it does not reach the Linux data path's packages.)
type Datagram struct {
	Src, Dst netip.AddrPort // the sender and the destination it was sent to
	// Payload is the capture's; the router copies what it keeps.
	Payload []byte
	// Owner is the sending process when the capture knows it (OwnerKnown).
	Owner      rules.Owner
	OwnerKnown bool
}

// UDPRouter is the router as a UDPRelay capture sees it: the daemon's router.Router.
type UDPRouter interface {
	// HandleUDP relays one datagram of the flow dg.Src → dg.Dst, answering through ret
	// (router.Router.HandleUDP); it does not wait for the network.
	HandleUDP(dg Datagram, ret UDPReturn)
	// Audit is the flow log the router records to (nil: none), for the capture's own
	// records of the flows it decides.
	Audit() *auditlog.Log
}

// UDPRelay is a Platform whose capture hands UDP to the router itself (Windows:
// the redirect engine).
type UDPRelay interface {
	// UseRouter gives the capture the router that carries its proxied UDP; it is called
	// before the first Install.
	UseRouter(r UDPRouter)
}

// GuardReporter is a Platform that reports its guard (Linux: watched; Windows: rivals and
// guarded paths).
type GuardReporter interface{ GuardStatus() GuardStatus }

// GuardStatus is what a platform knows of its guard's health while the daemon runs.
type GuardStatus struct {
	// Restores counts the times the guard was found changed by someone else and restored;
	// LastRestore is when the last one happened and LastDamage what was found.
	Restores    int
	LastRestore time.Time
	LastDamage  string
	// Watched: the platform restores its guard when changed (Linux).
	Watched bool
	// Rivals, GuardedApps, Unguarded: see control.GuardStat (Windows).
	Rivals, GuardedApps, Unguarded []string
}

// KernelCager is a Platform whose kernel cages processes by what they run (Linux).
type KernelCager interface {
	// KernelCaged returns this host's processes the kernel cages, and warnings for status:
	// each process of a known hypervisor's binary it does not cage, or why the processes
	// could not be told.
	KernelCaged() ([]control.KernelCagedStat, []string)
}

// ProfileDecider is a Platform that decides flows itself (Windows: the redirect engine, at a
// flow's first packet, passes a direct one without the router), so that a guest switched to
// a [profile.NAME] (router profile) must be decided by that profile there too.
type ProfileDecider interface {
	// UseProfiles gives the capture the router's choice of a flow's profile
	// (router.Router.ProfileFor: the Policy of the profile the flow's guest is switched to,
	// else the one given); it is called before the first Install.
	UseProfiles(pick func(p *policy.Policy, f *policy.Flow) *policy.Policy)
	// EndSwitched ends, after a switch, the capture's own live flows of the switched guest
	// (of) that its profile now refuses, counted among the capture's refusals, and returns
	// how many it ended.
	EndSwitched(of func(p *policy.Policy, f *policy.Flow) bool) int
}
