package policy

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/agentcage/router/internal/ports"
	"github.com/agentcage/router/rules"
)

// The host walls: the one decision of where a caged flow may reach this machine and the
// other guests. Every path asks it through Decide (the transparent TCP and UDP paths, the
// inbounds after a name is resolved, on every address it resolves to, the Windows engine,
// explain); the forwards and inbounds keep their client's caged identity so that their own
// connections meet it too (see package router).
//
// A caged flow reaches this machine's own addresses (loopback, every host address,
// link-local, 0.0.0.0 and ::, multicast and broadcast) only at
//
//   - a forward's or an inbound's exact listen address and port (a listen address of 0.0.0.0
//     or :: is every address of this machine at that port);
//   - a forward's connect address and port, for the process that carries a guest's traffic
//     (a caged app: a user-space NAT connects there for its guest); a flow from a VM
//     network or interface, or an inbound's client, reaches the model through the forward's
//     listen address, where the forward's allow list is checked, never around it;
//   - a host address and port that the direct rule deciding the flow names explicitly: its
//     hosts hold an address range with that address (not a whole family) and its ports that
//     port (so a user-space NAT guest reaches the model at its gateway without a forward);
//     never a catch-all, never a rule that names the destination by name only;
//   - DHCP (UDP to ports 67 and 547).
//
// Everything else of this machine is refused: StepHost (reason host-off-limits). A caged
// flow never reaches another guest's network (GuestNet: [capture] vm_networks, the subnets
// of the VM-facing interfaces, the sources a forward or an inbound allows) unless the rule
// that decides it names that address in its hosts: StepToGuest (reason to-guest). The walls hold for a flow's name too, when the way out connects from this
// machine (direct by name or fake IP, or a proxy that runs here): every address the name
// resolves to must pass, else StepHostName (this machine) or StepToGuest.

// Home says where an address leads a caged flow.
type Home uint8

const (
	Away  Home = iota // neither this machine nor a guest's network
	Host              // this machine: a local destination (IsLocal) or one of its addresses
	Guest             // a guest's network (GuestNet): another guest's
)

// HomeOf says where a leads.
func (p *Policy) HomeOf(a netip.Addr) Home {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return Away
	case p.Local(a):
		return Host
	case p.GuestNet(a):
		return Guest
	}
	return Away
}

// fromVM reports whether f comes from a VM network or interface (an inbound's client
// included), rather than from a caged process on this host.
func (p *Policy) fromVM(f *Flow) bool { return f.FromVM || p.FromVMNetwork(f.Src) }

// wall is the host-walls decision for the caged flow f reaching a at f.Port, which the
// rules decided with v (Index -1: no rule decided). It returns true when the walls let it
// pass, else the step that refuses it: StepHost or StepToGuest.
func (p *Policy) wall(f *Flow, a netip.Addr, v rules.Verdict) (Step, bool) {
	a = a.Unmap()
	switch p.HomeOf(a) {
	case Host:
		return StepHost, p.hostOpen(f, a) || p.ruleOpens(f, a, v)
	case Guest:
		return StepToGuest, p.namesAddr(v.Index, a)
	}
	return StepRule, true
}

// hostOpen reports whether the caged flow f may reach a (this machine's) at f.Port
// whatever the rules say: a forward's or an inbound's listen address, a forward's connect
// address for a caged process, DHCP.
func (p *Policy) hostOpen(f *Flow, a netip.Addr) bool {
	if f.Network == rules.UDP {
		return slices.Contains(ports.DHCPServers(), f.Port)
	}
	at := func(ends []netip.AddrPort) bool {
		for _, e := range ends {
			if e.Port() == f.Port && (e.Addr() == a || e.Addr().IsUnspecified() && (e.Addr().Is6() || a.Is4())) {
				return true
			}
		}
		return false
	}
	return at(p.listenEnds) || !p.fromVM(f) && at(p.connectEnds)
}

// openWhy says why hostOpen let f pass.
func (p *Policy) openWhy(f *Flow) string {
	at := netip.AddrPortFrom(f.Dst.Unmap(), f.Port).String()
	if f.Network == rules.UDP {
		return "port " + strconv.Itoa(int(f.Port)) + " is DHCP"
	}
	for _, e := range p.listenEnds {
		if e.Port() == f.Port && (e.Addr() == f.Dst.Unmap() || e.Addr().IsUnspecified()) {
			return at + " is a forward's or an inbound's listen address"
		}
	}
	return at + " is a forward's connect address, and the flow's process carries a guest's traffic there"
}

// Listener reports whether ap is a forward's or an inbound's listen address and port (one
// listening on 0.0.0.0 or :: listens on every address of this machine).
func (p *Policy) Listener(ap netip.AddrPort) bool {
	a := ap.Addr().Unmap()
	for _, e := range p.listenEnds {
		if e.Port() == ap.Port() && (e.Addr() == a || e.Addr().IsUnspecified() && p.Local(a)) {
			return true
		}
	}
	return false
}

// ruleOpens reports whether v, the rules' verdict for the caged flow f, opens a (this
// machine's) at f.Port: a direct rule that names both explicitly, unless a is a forward's
// connect address and f comes from a VM (it goes through the forward).
func (p *Policy) ruleOpens(f *Flow, a netip.Addr, v rules.Verdict) bool {
	return v.Action == rules.Direct && p.names(v.Index, a, f.Port) && !(p.fromVM(f) && p.forwardTarget(a, f.Port))
}

// forwardTarget reports whether a:port is a forward's connect address: reached from a VM
// through the forward only.
func (p *Policy) forwardTarget(a netip.Addr, port uint16) bool {
	for _, e := range p.connectEnds {
		if e.Port() == port && (e.Addr() == a || e.Addr().IsUnspecified()) {
			return true
		}
	}
	return false
}

// names reports whether rule i names a and port explicitly: an address range of its hosts
// holds a (a range that is not a whole family) and its ports hold port.
func (p *Policy) names(i int, a netip.Addr, port uint16) bool {
	if i < 0 || i >= len(p.rules) || !p.namesAddr(i, a) {
		return false
	}
	for _, pr := range p.rules[i].Ports {
		if pr.Lo <= port && port <= pr.Hi {
			return true
		}
	}
	return false
}

// namesAddr reports whether rule i names a in an address range of its hosts (a range that
// is not a whole family).
func (p *Policy) namesAddr(i int, a netip.Addr) bool {
	if i < 0 || i >= len(p.rules) {
		return false
	}
	for _, h := range p.rules[i].Hosts {
		if h.Kind == rules.HostRange && h.Range.Contains(a) && !wholeFamily(h.Range) {
			return true
		}
	}
	return false
}

func wholeFamily(r rules.IPRange) bool {
	if !r.Lo.IsUnspecified() {
		return false
	}
	if r.Lo.Is4() {
		return r.Hi == netip.AddrFrom4([4]byte{255, 255, 255, 255})
	}
	return r.Hi == netip.AddrFrom16([16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
}

// nameWall is the walls for the addresses f's name resolved to (f.Resolved, none: it could
// not be resolved, refused), decided by the rules with v: the first address that may not
// pass gives the step (StepHostName for this machine, StepToGuest for a guest's network).
func (p *Policy) nameWall(f *Flow, v rules.Verdict) (Step, bool) {
	if len(f.Resolved) == 0 {
		return StepHostName, false
	}
	for _, a := range f.Resolved {
		if s, ok := p.wall(f, a, v); !ok {
			if s == StepHost {
				s = StepHostName
			}
			return s, false
		}
	}
	return StepRule, true
}

// AnswerWall reports whether the host walls refuse a caged flow to a on every port and by
// every rule, and the step that refuses it (StepHost for this machine, StepToGuest for a
// guest's network): a DNS answer with a would lead a caged client nowhere it may go. An
// address where a forward or an inbound listens, a forward connects, or that some rule's
// hosts name is not refused (some port of it may be open).
func (p *Policy) AnswerWall(a netip.Addr) (Step, bool) {
	a = a.Unmap()
	home := p.HomeOf(a)
	if home == Away {
		return StepRule, false
	}
	for i := range p.rules {
		if p.namesAddr(i, a) {
			return StepRule, false
		}
	}
	if home == Guest {
		return StepToGuest, true
	}
	for _, e := range append(p.listenEnds[:len(p.listenEnds):len(p.listenEnds)], p.connectEnds...) {
		if e.Addr() == a || e.Addr().IsUnspecified() && (e.Addr().Is6() || a.Is4()) {
			return StepRule, false
		}
	}
	return StepHost, true
}
