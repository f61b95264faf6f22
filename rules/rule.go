// Package rules decides what happens to a flow: direct, proxy, block or ask.
//
// A rule set is an ordered list; the first rule that matches a flow wins. Within a rule every
// field that is given must match (AND); within a field any entry may match (OR); a rule with no
// fields matches every flow. When no rule matches, the verdict is direct with Index -1 (see
// NoMatch).
//
// The package is pure: it does no I/O, keeps no global state and imports nothing of this
// module. Rules are parsed once (ParseHost, ParsePorts, ParseApp, ...) and compiled into a
// Table whose Decide costs well under a microsecond for 10,000 rules; Linear is the slow,
// obviously correct matcher the tests compare it with.
package rules

import (
	"net/netip"
	"strconv"
)

// Action is what a verdict does with a flow.
type Action uint8

const (
	Direct Action = iota // the router connects to the destination itself
	Proxy                // the router connects through the named upstream SOCKS5 proxy
	Block                // the flow is refused (TCP reset)
	// Ask holds the flow (accepted, nothing dialled) while the router asks an administrator;
	// an approval sends it through the named upstream (Proxy), anything else refuses it.
	// Code that does not know Ask treats it as neither direct nor proxy: it never connects.
	Ask
)

func (a Action) String() string {
	switch a {
	case Direct:
		return "direct"
	case Proxy:
		return "proxy"
	case Block:
		return "block"
	case Ask:
		return "ask"
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// ParseAction parses "direct", "proxy", "block" or "ask".
func ParseAction(s string) (Action, bool) {
	switch s {
	case "direct":
		return Direct, true
	case "proxy":
		return Proxy, true
	case "block":
		return Block, true
	case "ask":
		return Ask, true
	}
	return 0, false
}

// Network is the transport of a flow. The zero value means "any" in a rule and "unknown" in
// a query; a rule that names a network does not match a query whose network is unknown.
type Network uint8

const (
	AnyNetwork Network = iota
	TCP
	UDP
)

func (n Network) String() string {
	switch n {
	case AnyNetwork:
		return "any"
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	}
	return "network(" + strconv.Itoa(int(n)) + ")"
}

// ParseNetwork parses "tcp" or "udp".
func ParseNetwork(s string) (Network, bool) {
	switch s {
	case "tcp":
		return TCP, true
	case "udp":
		return UDP, true
	}
	return AnyNetwork, false
}

// Rule is one parsed rule. Empty slices (and AnyNetwork) leave a field unconstrained. A Rule
// is plain data: build it with the Parse functions so that every entry is normalized
// (lower-case names, unmapped addresses, sorted-free but valid ranges).
type Rule struct {
	Name     string
	Network  Network
	Sources  []IPRange // the flow's source address (VM subnets, the host)
	Hosts    []Host    // the destination: addresses, ranges, names, *.suffix
	Ports    []PortRange
	Apps     []App    // the owning process: image name or full path globs
	Services []string // Windows services hosted by the owning svchost.exe (lower case)
	// Caged matches caged flows only: from a VM network or a VM-facing interface, or owned by
	// a caged app (package policy says which flows are, in Query.Caged).
	Caged  bool
	Action Action
	Proxy  string // the upstream's name when Action is Proxy (or Ask: where an approval sends it)
	// Disabled keeps the rule in the list but out of every decision: it never matches, and
	// Explain says so (the config's `enabled = false`, a Proxifier rule's unticked box).
	Disabled bool
}

// Query describes one flow. Decide and Explain never modify it.
type Query struct {
	Network Network
	Src     netip.Addr // invalid when unknown
	Dst     netip.Addr // invalid when only a host name is known
	Port    uint16
	// Host is the destination's name when one is known (a fake-IP mapping, a DNS answer, or
	// explain's --dst). Case and a trailing dot do not matter.
	Host string
	// Owner is the owning process (rules match its App, AppPath and Services; case does not
	// matter); the zero Owner when it is unknown.
	Owner
	// Caged says the flow is caged (see Rule.Caged); the caller decides.
	Caged bool
}

// Verdict is the outcome of a decision.
type Verdict struct {
	Action Action
	Proxy  string // upstream name when Action is Proxy
	Index  int    // the winning rule's position, or -1 when no rule matched
	Name   string // the winning rule's name, or NoMatch
}

// NoMatch is the Verdict name when no rule matches; the action is then Direct.
const NoMatch = "(no rule matched)"

func verdictOf(rs []Rule, i int) Verdict {
	if i < 0 {
		return Verdict{Action: Direct, Index: -1, Name: NoMatch}
	}
	r := &rs[i]
	return Verdict{Action: r.Action, Proxy: r.Proxy, Index: i, Name: r.Name}
}

// Linear decides by trying every rule in order: the reference the compiled Table is tested
// against, and fast enough for a handful of rules.
func Linear(rs []Rule, q *Query) Verdict {
	f := newFlow(q)
	for i := range rs {
		if rs[i].mismatch(&f) == "" {
			return verdictOf(rs, i)
		}
	}
	return verdictOf(rs, -1)
}

// Match reports whether the rule matches the flow.
func (r *Rule) Match(q *Query) bool {
	f := newFlow(q)
	return r.mismatch(&f) == ""
}

// Mismatch returns the name of the first field of the rule that does not match the flow
// (one of the Field constants), or "" when the rule matches.
func (r *Rule) Mismatch(q *Query) string {
	f := newFlow(q)
	return r.mismatch(&f)
}

// The field names, as in the configuration file.
const (
	FieldNetwork  = "network"
	FieldSources  = "sources"
	FieldHosts    = "hosts"
	FieldPorts    = "ports"
	FieldApps     = "apps"
	FieldServices = "services"
	FieldCaged    = "caged"
	// FieldEnabled is the "field" a disabled rule fails on: it matches nothing.
	FieldEnabled = "enabled"
)

// Bare reports whether r names neither the flow (sources, apps, services, caged) nor its
// destination (hosts, ports): a catch-all, whatever its network or action.
func (r *Rule) Bare() bool {
	return len(r.Sources) == 0 && len(r.Hosts) == 0 && len(r.Ports) == 0 && len(r.Apps) == 0 && len(r.Services) == 0 && !r.Caged
}

// Cages reports whether r puts the processes it names (apps, services) in the cage: an
// enabled proxy or block rule. A disabled rule cages nothing, as it decides nothing.
func (r *Rule) Cages() bool { return !r.Disabled && r.Action != Direct }

// HostOnly reports whether r is a bare direct rule, the host-only catch-all: a direct rule
// that names nothing takes this host's own flows only, never caged ones (a caged flow no
// rule names is refused). The policy, lint's boxes and lint's cage checks all ask this.
func (r *Rule) HostOnly() bool { return r.Bare() && r.Action == Direct }

// MatchApp reports whether the flow's process is one r names: its image or path matches one
// of r.Apps, or it hosts one of r.Services. Every other field of r is ignored; a rule that
// names no app or service matches nothing.
func (r *Rule) MatchApp(q *Query) bool {
	f := newFlow(q)
	return len(r.Apps) > 0 && matchApps(r.Apps, &f) || len(r.Services) > 0 && matchServices(r.Services, f.services)
}
