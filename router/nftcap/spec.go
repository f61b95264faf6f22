package nftcap

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Spec describes what the table captures and guards. The zero value of every optional field
// is documented with it; Validate reports what is missing or contradictory.
type Spec struct {
	// Table is the name of the inet table the router owns (the config's [capture] table,
	// conf.DefaultTable unless set). Required. Install replaces this table whole and touches
	// no other.
	Table string
	// VMNetworks are the source networks whose forwarded/NATed traffic is captured, IPv4 and
	// IPv6 alike. Their TCP is redirected to ListenerPort, their DNS to DNSPort; the rest of
	// their forwarded traffic is refused, and of the host they reach only what the package
	// doc lists. Empty means no VM capture (the listener ports stay guarded).
	VMNetworks []netip.Prefix
	// VMInterfaces are interfaces whose forwarded traffic is caged whole, like a VM
	// network's, whatever its source address and family: names as Linux spells them, a
	// trailing '*' matching any suffix ("vboxnet*"). An interface that does not exist (yet)
	// matches nothing until it appears.
	VMInterfaces []string
	// Local also captures this host's own outbound TCP and DNS (nat output hook) and
	// refuses the rest of what it sends (UDP such as QUIC, ICMP), except DHCP and the UDP
	// ports of LocalUDPAllow: the router cannot proxy it. Sockets carrying Mark, loopback,
	// link-local, multicast and the host's own addresses are never captured. Local needs a
	// non-zero Mark, or the router would capture its own connections.
	Local bool
	// LocalUDPAllow are UDP destination ports this host may still send to directly when
	// Local (e.g. 123 for NTP); DHCP (67, 547) always may.
	LocalUDPAllow []uint16
	// ListenerPort is the router's transparent TCP listener; the router listens on
	// [::]:ListenerPort (dual stack). Required.
	ListenerPort uint16
	// TCPTProxy hands VM TCP to the listener by TPROXY instead of the nat chain's redirect:
	// no NAT, the accepted connection's local address is its original destination. The
	// listener needs IP_TRANSPARENT (TransparentControl); without it, or with nobody
	// listening, the connections are redirected as without TCPTProxy. It uses UDPMark and
	// UDPTable, which it then requires, like UDPPort. The host's own TCP (Local, CagedApps)
	// is redirected either way: TPROXY works in prerouting only. The daemon leaves it off:
	// measured, it costs the kernel more per connection than the redirect (README,
	// Performance).
	TCPTProxy bool
	// DNSPort receives captured DNS (UDP and TCP port 53) on the same addresses; 0 means
	// captured DNS is refused instead.
	DNSPort uint16
	// Forwards are the only host services VM networks may reach (the built-in
	// portproxy replacement). Each listen address:port accepts only its Allow sources, from
	// anywhere.
	Forwards []Forward
	// Inbounds are the explicit proxies on this host ([[inbound]]): guarded exactly like
	// Forwards (each listen address:port accepts only its Allow sources, from anywhere), in
	// chains of their own.
	Inbounds []Forward
	// Mark is the SO_MARK the router puts on its own sockets (see MarkControl): packets
	// carrying it are never captured. Required when Local.
	Mark uint32
	// LogGroup, when not 0, is the NFLOG group the refusals go to (a few a second per
	// reason, with their headers; see package nflog). The named counters count every
	// refusal either way.
	LogGroup uint16
	// UDPPort is the router's transparent UDP socket (see ListenUDP): VM UDP other than
	// DNS, and with Local this host's own UDP, is handed to it by TPROXY with its original
	// destination, instead of being refused. 0: no UDP capture (refused as the package doc
	// says). Nobody listening (the guard alone) means refused as well.
	UDPPort uint16
	// UDPMark is the packet mark TPROXY puts on the UDP (and, with TCPTProxy, the TCP) it
	// hands over, and UDPTable the routing table that a policy routing rule "fwmark UDPMark
	// lookup UDPTable" sends such packets to: it holds only "local default dev lo" for each
	// family. Install puts the rule and routes in place, Remove takes them away. Both are
	// required with UDPPort or TCPTProxy; UDPMark differs from Mark.
	UDPMark  uint32
	UDPTable uint32
	// CagedApps are the executables' file names (a trailing '*' matching any suffix; see
	// package cagemark: a process running one, or a child of one, is caged, whatever it
	// calls itself) of the caged processes of this host: the user-space NATs that carry
	// guests' traffic in their own sockets. Install has the kernel mark
	// every socket they open with CagedMark (package cagemark), and the table captures
	// those sockets whatever Local says: their DNS to any address (a loopback stub such as
	// 127.0.0.53 included) goes to DNSPort, their TCP to every destination (loopback and
	// this host's addresses included, but the forwards' and inbounds' listen addresses,
	// which their own chains guard) to ListenerPort, their UDP to UDPPort; the rest of
	// what they send to this host is refused. Entries the kernel cannot tell (paths, other
	// wildcards) are left out. Empty: nothing is marked.
	CagedApps []string
	// CagedMark is the socket mark of CagedApps' sockets. Required with CagedApps;
	// differs from Mark and UDPMark.
	CagedMark uint32
}

// Forward is one host service reachable from the VM networks: a forward or an inbound.
type Forward struct {
	// Listen is the host address and TCP port the service listens on. An unspecified
	// address matches every host address: 0.0.0.0 every IPv4 address, :: every address
	// of both families (a Go listener on [::] is dual stack). A zone is ignored.
	Listen netip.AddrPort
	// Allow are the sources that may connect; empty means none may (everything refused).
	Allow []netip.Prefix
}

// caged reports whether the table captures caged processes' sockets (CagedApps).
func (s Spec) caged() bool { return len(s.CagedApps) > 0 }

// table returns the table name Install uses.
func (s Spec) table() string { return s.Table }

// Validate reports every problem of s in one error (errors.Join), or nil.
func (s Spec) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := validTableName(s.table()); err != nil {
		errs = append(errs, err)
	}
	if s.ListenerPort == 0 {
		add("listener port is 0")
	}
	if s.DNSPort != 0 && s.DNSPort == s.ListenerPort {
		add("dns port %d equals the listener port", s.DNSPort)
	}
	if s.Local && s.Mark == 0 {
		add("local capture needs a non-zero mark (the router's own sockets would be captured)")
	}
	errs = append(errs, s.validateUDP()...)
	if s.caged() {
		switch s.CagedMark {
		case 0:
			add("caged apps need a non-zero caged mark")
		case s.Mark:
			add("caged mark %#x equals the router's mark", s.CagedMark)
		case s.UDPMark:
			add("caged mark %#x equals the udp mark", s.CagedMark)
		}
	}
	for _, p := range s.VMNetworks {
		if err := validPrefix(p); err != nil {
			add("vm network %v: %w", p, err)
		}
	}
	for _, i := range s.VMInterfaces {
		base := strings.TrimSuffix(i, "*")
		if base == "" || len(base) > 15 || strings.ContainsAny(base, "/ *:") {
			add("vm interface %q: not an interface name (a trailing '*' may match any suffix)", i)
		}
	}
	for _, l := range []struct {
		what string
		fs   []Forward
	}{{"forward", s.Forwards}, {"inbound", s.Inbounds}} {
		for i, f := range l.fs {
			if !f.Listen.IsValid() {
				add("%s %d: invalid listen address", l.what, i)
				continue
			}
			if f.Listen.Addr().Is4In6() {
				add("%s %d: listen %v: use the plain IPv4 address", l.what, i, f.Listen)
			}
			switch f.Listen.Port() {
			case 0:
				add("%s %d: listen %v: port 0", l.what, i, f.Listen)
			case s.ListenerPort:
				add("%s %d: listen %v: port is the listener port", l.what, i, f.Listen)
			case s.DNSPort:
				add("%s %d: listen %v: port is the dns port", l.what, i, f.Listen)
			}
			for _, p := range f.Allow {
				if err := validPrefix(p); err != nil {
					add("%s %d: allow %v: %w", l.what, i, p, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func validPrefix(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return errors.New("invalid prefix")
	case p.Addr().Is4In6():
		return errors.New("IPv4-mapped IPv6 prefix: use the plain IPv4 prefix")
	case p.Addr().Zone() != "":
		return errors.New("prefix with a zone")
	}
	return nil
}

// validTableName checks a table name as the kernel does (NFT_NAME_MAXLEN is 256 with the
// terminating NUL) and refuses characters nft would need to quote.
func validTableName(name string) error {
	if name == "" || len(name) > 255-len(holdSuffix) {
		return fmt.Errorf("table name %q: length must be 1..%d", name, 255-len(holdSuffix))
	}
	if strings.IndexFunc(name, func(r rune) bool {
		return !(r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) >= 0 {
		return fmt.Errorf("table name %q: only letters, digits, '_', '-' and '.' allowed", name)
	}
	return nil
}

// holdSuffix names the hold table after the router's: "router_hold".
const holdSuffix = "_hold"

// HoldTable is the name of the hold table of the router's table named table (see the
// package doc, "The hold table").
func HoldTable(table string) string { return table + holdSuffix }

// WithHolder makes Install create the hold table through h, which then owns it (Linux).
func WithHolder(h *Holder) Option {
	return func(o *options) { o.holder = h }
}

// Option changes how Install, Remove and Installed reach the kernel.
type Option func(*options)

type options struct {
	netNS  int     // fd of a network namespace; 0 means the caller's
	holder *Holder // owns the hold table Install creates (Linux); nil: none
}

// WithNetNS makes the call act in the network namespace the open file descriptor fd refers
// to (e.g. an open /run/netns/NAME). The caller keeps ownership of fd.
func WithNetNS(fd int) Option {
	return func(o *options) { o.netNS = fd }
}
