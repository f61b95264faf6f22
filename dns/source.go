package dns

import (
	"net"
	"net/netip"
	"strings"

	"github.com/agentcage/router/rules"
)

// Source tells who asked a query, for the per-source budgets (fake-IP addresses, queries in
// flight to an upstream, TCP connections). The zero Source is "unknown": every query without
// a source shares one budget.
type Source struct {
	// Addr is the client's address (a VM's, or the host's own); the zero Addr is unknown.
	Addr netip.Addr
	// Owner is the process that asked, when the capture knows it (the Windows engine knows
	// the process), whole, so that the policy asked about the query (Walls.Caged,
	// Names.Refused) judges it as it judges the process's connections; the zero Owner
	// otherwise. Its App keys the budgets, compared case-insensitively.
	rules.Owner
}

// maxAppKey bounds the part of Source.App kept in a budget key.
const maxAppKey = 256

// sourceKey is what a budget is kept under: the guest network (Config.Guests) the address is
// in, else an IPv4 address or an IPv6 /64 (a guest picks any address of its /64 at will, so
// a finer key would only let it mint budgets; VMs that share a /64 share a budget for their
// IPv6 queries), and the program name.
type sourceKey struct {
	prefix netip.Prefix // zero when the address is unknown
	app    string
}

func (s Source) key() sourceKey {
	var k sourceKey
	if a := s.Addr.Unmap(); a.IsValid() {
		bits := 32
		if a.Is6() {
			bits = 64
		}
		k.prefix, _ = a.WithZone("").Prefix(bits)
	}
	if s.App != "" {
		app := s.App
		if len(app) > maxAppKey {
			app = app[:maxAppKey]
		}
		k.app = strings.ToLower(app)
	}
	return k
}

// String is the key as logs show it: "10.0.2.15", "fd00:1::/64", "app.exe@10.0.2.15",
// a guest network "10.0.2.0/24", "unknown".
func (k sourceKey) String() string {
	var addr string
	switch {
	case !k.prefix.IsValid():
		addr = "unknown"
	case k.prefix.Addr().Is4() && k.prefix.Bits() == 32:
		addr = k.prefix.Addr().String()
	default:
		addr = k.prefix.String()
	}
	if k.app != "" {
		return k.app + "@" + addr
	}
	return addr
}

// sourceOf is the Source of a peer as a net.Conn or a miekg ResponseWriter reports it.
func sourceOf(a net.Addr) Source {
	switch a := a.(type) {
	case *net.UDPAddr:
		return Source{Addr: a.AddrPort().Addr().Unmap()}
	case *net.TCPAddr:
		return Source{Addr: a.AddrPort().Addr().Unmap()}
	}
	if a == nil {
		return Source{}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return Source{Addr: ap.Addr().Unmap()}
	}
	return Source{}
}
