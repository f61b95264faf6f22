package policy

import (
	"net/netip"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
)

// Gate is the model gate a flow meets: the forward whose HTTP gate serves it.
type Gate struct {
	// Forward is the forward's name ([[forward]] name).
	Forward string
	// Raw says the forward is a raw TCP pipe (api = "tcp"): the flow passes as that forward
	// passes, untouched.
	Raw bool
}

// gateEnd is one forward's target, as the gate decision needs it.
type gateEnd struct {
	name    string
	connect netip.AddrPort
	raw     bool
}

func gateEnds(cfg *conf.Config) []gateEnd {
	var g []gateEnd
	for _, f := range cfg.Forwards {
		g = append(g, gateEnd{name: f.Name, connect: unmapped(f.Connect), raw: f.Raw()})
	}
	return g
}

// Gate is the one decision of which model gate a flow meets, on every path (the Linux
// relay's transparent flows and inbounds, and `router explain`): the caged TCP flow f,
// which d lets through direct, whose destination is a forward's connect address, meets
// that forward's gate, never a raw pipe, unless the forward itself is one (api = "tcp").
//
// "A forward's connect address" is every way to the model server a caged flow may be let
// through to: the connect address itself (a user-space NAT's process, such as slirp4netns,
// pasta, QEMU's -netdev user or VirtualBox NAT, connects to 127.0.0.1:<port> for its
// guest), and, when the connect address is this machine's (loopback, one of its addresses,
// unspecified), any of this machine's addresses at the connect port: 127.0.0.1, ::1 or
// another address a direct rule names (a server listening on every address serves them
// all, and the router cannot see which address it bound). A flow the router dials by its
// name (a fake IP's, an inbound's client's) is judged by every address the name resolved
// to (f.Resolved): a name that leads to the model meets its gate. When two forwards connect to the port, the one whose connect
// address is the destination's wins, else the first in the config.
//
// A forward's or an inbound's listen address and port is not a gate's target: the flow
// reaches that listener, which is the gate itself. A direct rule that opens an address
// and port no forward connects to opens it raw: the router cannot tell a model server
// there (router lint reports a direct rule that opens this machine's loopback to caged
// traffic at a port no forward fronts).
//
// ok is false when f meets no gate.
func (p *Policy) Gate(f *Flow, d Decision) (g Gate, ok bool) {
	if len(p.gates) == 0 || f.Network != rules.TCP || !d.Caged || d.Action != rules.Direct {
		return Gate{}, false
	}
	if f.Dst.IsValid() && !p.InPool(f.Dst) {
		if g, ok := p.gateAt(netip.AddrPortFrom(f.Dst.Unmap(), f.Port)); ok {
			return g, true
		}
	}
	// A name the router dials by what it resolves to: a fake IP's, or an inbound's
	// client's.
	for _, a := range f.Resolved {
		if g, ok := p.gateAt(netip.AddrPortFrom(a.Unmap(), f.Port)); ok {
			return g, true
		}
	}
	return Gate{}, false
}

// gateAt is the gate of a flow to ap (unmapped), if any.
func (p *Policy) gateAt(ap netip.AddrPort) (Gate, bool) {
	if p.Listener(ap) {
		return Gate{}, false
	}
	a := ap.Addr()
	host := p.HomeOf(a) == Host || a.IsUnspecified()
	found := -1
	for i, e := range p.gates {
		if e.connect.Port() != ap.Port() {
			continue
		}
		if e.connect.Addr() == a {
			found = i
			break
		}
		c := e.connect.Addr()
		if found < 0 && host && (c.IsUnspecified() || p.HomeOf(c) == Host) {
			found = i
		}
	}
	if found < 0 {
		return Gate{}, false
	}
	return Gate{Forward: p.gates[found].name, Raw: p.gates[found].raw}, true
}

// GateWhy says, for explain, which gate f meets under d: "" when none.
func (p *Policy) GateWhy(f *Flow, d Decision) string {
	g, ok := p.Gate(f, d)
	switch {
	case !ok:
		return ""
	case g.Raw:
		return "forward " + g.Forward + " (api = \"tcp\": a raw pipe, every call passes)"
	}
	return "forward " + g.Forward + " (its HTTP gate: only the inference calls of its api pass; the rest is refused with 403, counted as model-api)"
}
