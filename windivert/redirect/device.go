package redirect

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/rules"
)

// Meta is what comes with a packet from a Device, and what the Device needs to send one.
type Meta struct {
	// Outbound is the direction: a packet the host sends (read) or one to hand to the
	// network (write); false is a packet to deliver to the host's own stack.
	Outbound bool
	// Loopback marks a packet from and to this machine. The engine never diverts one.
	Loopback bool
	// Impostor marks a packet another driver injected (WinDivert's flag). A packet passed
	// on keeps it: WinDivert then lowers its TTL on re-injection, which ends the loops that
	// antivirus and VPN drivers re-injecting the same packet would otherwise make. Packets
	// the engine makes itself carry none.
	Impostor bool
	// ChecksumsValid says the IP header checksum and the TCP/UDP checksum are correct
	// (on read), or have been made correct (on write). When false the engine recomputes
	// them from scratch after a rewrite.
	ChecksumsValid bool
	// IfIdx and SubIfIdx identify the interface (WinDivert's NETWORK data). The engine
	// copies them from a captured packet to the packets it derives from it, which WinDivert
	// needs to inject inbound. Devices without interfaces leave them zero.
	IfIdx, SubIfIdx uint32
}

// Device moves IP packets (no link header) between the engine and the host.
//
// Read blocks until at least one packet is there, and fills buf with packets back to back
// (packet i has metadata metas[i]); it returns the bytes used and the packet count, at most
// len(metas). A packet longer than buf may be truncated (the engine then drops it). After
// Close, Read returns an error. Only one goroutine calls Read.
//
// Write sends one packet: with m.Outbound to the network ("pass"), otherwise into the host
// as if it had arrived. A device that cannot send outbound (a TUN) returns ErrCannotPass.
// Write must be safe for concurrent use and must not keep pkt after it returns.
type Device interface {
	Read(buf []byte, metas []Meta) (n, count int, err error)
	Write(pkt []byte, m Meta) error
	Close() error
}

// BatchDevice is a Device that sends several packets with one call (WinDivertSendEx): the
// engine hands it what one read batch gives. WriteBatch sends pkts[i] as metas[i]
// describes, in order, and returns how many were sent and the first error; like Write it
// must not keep the packets after it returns. Only the goroutine that calls Read calls it.
type BatchDevice interface {
	Device
	WriteBatch(pkts [][]byte, metas []Meta) (int, error)
}

// ErrCannotPass is returned by Device.Write for an outbound packet on a device that has no
// network behind it. The engine counts such packets as dropped.
var ErrCannotPass = errors.New("redirect: the device cannot pass packets to the network")

// EventKind is the kind of a socket event.
type EventKind uint8

const (
	// EventConnect: a socket connects (TCP connect(), or the first datagram of a UDP socket
	// to a remote address). It is classified before the first packet leaves.
	EventConnect EventKind = iota + 1
	// EventClose: the socket is closed.
	EventClose
)

// SocketEvent is a connect or close of a socket, with the process that did it.
type SocketEvent struct {
	Kind   EventKind
	Proto  uint8 // packet.ProtoTCP or packet.ProtoUDP
	Local  netip.AddrPort
	Remote netip.AddrPort
	PID    uint32
	// At is when the event happened (zero when the device cannot tell): the owner found for
	// PID must have existed then (see PIDAtResolver).
	At time.Time
}

// EventSource delivers socket events (WinDivert's SOCKET layer). ReadEvents blocks until
// at least one event is there and returns how many it put into evs; it returns an error once
// the Device it belongs to is closed. Only one goroutine calls it.
type EventSource interface {
	ReadEvents(evs []SocketEvent) (int, error)
}

// Names is the DNS side's knowledge of names (dns.Server implements it).
type Names interface {
	// NameFor returns the name behind a, when one is known: a fake-IP pool address's name
	// (the pool itself is the policy's), or a name seen resolving to a.
	NameFor(a netip.Addr) (string, bool)
}

// DNSHandler answers a DNS query in wire format (dns.Server implements it); nil means no
// reply is due. src is who asked (the app's address, and its process when known): the DNS
// server budgets its fake-IP pool per source. It is called from worker goroutines, at most
// Options.DNSWorkers at once.
type DNSHandler interface {
	HandleWireFrom(ctx context.Context, src dns.Source, query []byte, udp bool) []byte
}

// PIDResolver describes a process by PID (proc.WindowsResolver implements it).
type PIDResolver interface {
	ByPID(pid uint32) (rules.Owner, error)
}

// PIDAtResolver is a PIDResolver that can tell a process that existed at a moment from one
// that reused its PID later (proc.WindowsResolver). The engine uses it for flows named by a
// socket event with a time.
type PIDAtResolver interface {
	ByPIDAt(pid uint32, at time.Time) (rules.Owner, error)
}

// Conn is a TCP connection of the host: its local and remote ends and its owner (0 when
// unknown).
type Conn struct {
	Local, Remote netip.AddrPort
	PID           uint32
}

// LookupFunc finds the process owning the socket with the given protocol, local and remote
// address (the IP Helper tables on Windows, sock_diag on Linux). It may block; the engine
// calls it on worker goroutines.
type LookupFunc func(proto uint8, local, remote netip.AddrPort) (rules.Owner, error)
