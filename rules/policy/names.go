package policy

import (
	"slices"
	"strconv"

	"github.com/agentcage/router/internal/ports"
	"github.com/agentcage/router/rules"
)

// RefusesName reports whether every flow from f's source to the name f.Host would be
// refused, whatever its port and network, and the decision at the lowest port, so that the
// router's DNS can say so at once (an answer the agent reads as "blocked, and why") instead
// of handing out an address whose every connection it would reset. f carries the source as a
// capture knows it (Src, FromVM, Owner) and the name in Host; its Dst, Port,
// Network and Sniffed are ignored. Only caged flows are judged (false otherwise); a name
// held under ask is never refused here, nor one that a rule may send direct (the data path
// decides that with the addresses the name resolves to).
//
// A flow's decision changes with its port only where a rule's port range starts or ends (or
// at the ports the implicit steps take: DNS, DNS over TLS), so the decision at each such
// point, for TCP and UDP, is the decision of every port up to the next point.
func (p *Policy) RefusesName(f *Flow) (Decision, bool) {
	if f.Host == "" {
		return Decision{}, false
	}
	q := Flow{Src: f.Src, Owner: f.Owner, FromVM: f.FromVM, Host: f.Host}
	if !p.Caged(&q) {
		return Decision{}, false
	}
	var first Decision
	for i, port := range p.portPoints {
		for _, n := range []rules.Network{rules.TCP, rules.UDP} {
			q.Port, q.Network = port, n
			d := p.Decide(&q)
			if d.Action != rules.Block || d.Step == StepAsk {
				return Decision{}, false
			}
			if i == 0 && n == rules.TCP {
				first = d
			}
		}
	}
	return first, true
}

// RefusalText says, for a refused flow's decision, what refused it, in the words the router
// answers a guest with (a DNS answer's Extended DNS Error, an HTTP 403): the rule or the
// implicit step, and how the host's owner can change it. It names a rule, never a config's
// values, so it holds no secret.
func RefusalText(d Decision) string {
	why := d.Step.String()
	switch d.Step {
	case StepRule:
		why = "rule #" + strconv.Itoa(d.Index+1) + " " + strconv.Quote(d.Name) + " blocks it"
	case StepCaged:
		why = "caged traffic, and no rule lets it out"
	case StepCanary:
		why = "it carries a credential's placeholder, which goes only to its forward"
	}
	return "refused by the router on the host: " + why + "; the host's owner can allow it in the router's config (router explain shows why)"
}

// portPoints are the ports at which a flow's decision may change: port 1, where each rule's
// port range starts and just past where it ends, and the implicit steps' ports (DNS and DNS
// over TLS) and the ports after them; sorted, each once.
func portPoints(rs []rules.Rule) []uint16 {
	pts := []uint16{1, ports.DNS, ports.DNS + 1, ports.DoT, ports.DoT + 1}
	for i := range rs {
		for _, pr := range rs[i].Ports {
			pts = append(pts, max(pr.Lo, 1))
			if pr.Hi < 65535 {
				pts = append(pts, pr.Hi+1)
			}
		}
	}
	slices.Sort(pts)
	return slices.Compact(pts)
}
