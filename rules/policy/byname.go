package policy

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/agentcage/router/rules"
)

// Where a direct dial goes: the one decision (directByName) that the relay, the event loop,
// the inbounds, the Windows engine (which leaves such flows to the relay) and explain all
// take from Decision.ByName.
//
// A name picks a rule; only the router's own resolver picks the address a direct dial
// connects to. A direct verdict connects
//
//   - to the flow's address (Flow.Dst) when the address alone wins it: the same rule
//     decides the flow without the name its first bytes carry, or there is no such name
//     (the name of a fake IP, or one seen in the router's DNS answer for that address,
//     is the router's own);
//   - to its name as the router resolves it (Flow.Resolved, looked up through the proxy's
//     resolver) otherwise: a flow with no address (an inbound's client asked for a name), a
//     fake IP, or a real address whose verdict the name from its first bytes won (a TLS
//     server name or an HTTP Host the guest wrote: Decision.Untrusted). Every address the
//     name resolves to meets the host walls (step 8 of the package documentation); a name
//     that resolves to this machine, a guest's network, or nothing is refused
//     (StepHostName, StepToGuest). The flow's own address is dialed first when it is one of
//     the name's, so an honest client keeps the server it chose.
//
// So a guest that writes `Host: x.corp.test` (or that server name in a ClientHello) to an
// address of its choosing, under a direct rule for *.corp.test, reaches x.corp.test and
// nothing else; under a rule for localhost it reaches this machine only where the walls
// open it. The choice made is to dial the name rather than to refuse a flow whose address
// is not among the name's: names served by many addresses (CDNs, round-robin DNS) answer a
// second lookup with others, and a refusal would break honest clients. A proxy verdict is
// untouched: the proxy gets the name and resolves it itself.
//
// Without the name, a flow's verdict is asked again with no host at all: a DNS-seen name
// (proxy mode) that the capture replaced by the sniffed one is not consulted, which at
// worst sends an honest flow by name where it could have gone to its address.

// directByName decides where the direct verdict v (the rules', for f asked as q) connects:
// byName to f's name as the router resolves it; untrusted when that is because the name
// came from f's first bytes and won v. See the comment above.
func (p *Policy) directByName(f *Flow, q *rules.Query, caged bool, v rules.Verdict) (byName, untrusted bool) {
	dst := f.Dst.Unmap()
	if !dst.IsValid() || p.InPool(dst) {
		return true, false
	}
	if _, sniffed := p.Name(f); !sniffed {
		return false, false
	}
	bare := *q
	bare.Host = ""
	var w rules.Verdict
	if caged {
		w = p.decideCaged(&bare)
	} else {
		w = p.all.Decide(&bare)
	}
	if w.Index == v.Index && w.Action == rules.Direct {
		return false, false
	}
	return true, true
}

// DialAddrs returns the addresses a direct dial of f, decided d, connects to, in the order
// to try them: f.Dst's address, unless d.ByName; then f.Resolved (nil when the name was not
// looked up: the caller resolves it through the proxy's resolver and orders the answer with
// DirectOrder), f's own address first when it is one of them.
func (p *Policy) DialAddrs(f *Flow, d Decision) []netip.Addr {
	if !d.ByName {
		return []netip.Addr{f.Dst.Unmap()}
	}
	return DirectOrder(f.Dst, f.Resolved)
}

// DirectOrder orders the addresses a name resolved to (resolved) for a direct dial by name:
// dst (the flow's own address, if any) first when it is one of them, the others as the
// resolver gave them. It returns a new slice when it reorders; resolved is not modified.
func DirectOrder(dst netip.Addr, resolved []netip.Addr) []netip.Addr {
	dst = dst.Unmap()
	i := slices.IndexFunc(resolved, func(a netip.Addr) bool { return a.Unmap() == dst })
	if i <= 0 {
		return resolved
	}
	out := make([]netip.Addr, 0, len(resolved))
	out = append(out, resolved[i])
	out = append(out, resolved[:i]...)
	return append(out, resolved[i+1:]...)
}

// DialWhy says in words where a direct way out of f (decided d) connects, or would have
// (a refusal by the walls on its name's addresses), for explain and logs: "" unless
// d.ByName.
func (p *Policy) DialWhy(f *Flow, d Decision) string {
	if !d.ByName {
		return ""
	}
	name, _ := p.Name(f)
	to := "the router dials " + strconv.Quote(name) + " as its own resolver resolves it (through the proxy), every address it resolves to checked by the host walls"
	if len(f.Resolved) > 0 {
		to += " (" + addrList(DirectOrder(f.Dst, f.Resolved)) + ")"
	}
	if d.Action != rules.Direct {
		to = "a direct dial would go to " + strconv.Quote(name) + " as the router's own resolver resolves it, and the walls refused where it leads"
	}
	if !d.Untrusted {
		return to
	}
	return "the name " + strconv.Quote(name) + " came from the flow's first bytes (a TLS server name or an HTTP Host), which the guest writes as it likes: it is not trusted to pick the address of a direct dial, and the address alone would not get this verdict; " +
		to + ", never " + f.Dst.Unmap().String() + " unless the name resolves there"
}

func addrList(as []netip.Addr) string {
	s := ""
	for i, a := range as {
		if i > 0 {
			s += ", "
		}
		s += a.String()
	}
	return s
}
