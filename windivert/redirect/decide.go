package redirect

import (
	"net/netip"

	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
	"github.com/agentcage/router/windivert/packet"
)

// outcome is what happens to the packets of a flow once it is decided: the action and, for
// actReflect, the peer the listener sees and the listener's address. The zero outcome
// (actNone) does nothing: the packet is held, or was already handled.
type outcome struct {
	act      action
	peer, to netip.AddrPort
	// owner is the flow's process (actDNS: the one that asks, for the DNS server; actRelay:
	// for the router's decision, when ownerKnown); a PID alone when it was not looked up.
	owner      rules.Owner
	ownerKnown bool
}

// decideLocked decides flow f (pending) from what is known of it and sets its state:
// refused flows leave the table, reflected ones get their peer. It is called with e.mu
// held and returns what to do with f's packets.
func (e *Engine) decideLocked(pol *policy.Policy, f *flow, now int64) outcome {
	k := f.key
	tcp := k.proto == packet.ProtoTCP
	if f.pidKnown && !f.ownerKnown {
		f.owner.PID = int(f.pid) // for logs; Owner still looks the process up
	}
	e.unmarkPendingLocked(f)
	act := e.verdictLocked(pol, f)
	if act == actPass && !f.caged && !(f.pidKnown && e.own[f.pid]) {
		// The host's own flow: it takes room in the host's share, or, for UDP and ICMP
		// when none can be made, passes without an entry (its next datagram is decided
		// anew); a TCP flow without room is refused.
		if !e.admitHostLocked() {
			if k.proto == packet.ProtoTCP {
				e.st.tableFull.Add(1)
				act, f.why = actRefuse, refusal.Limit
			} else {
				e.removeLocked(f, now)
				e.st.passed.Add(1)
				f.last = now
				return outcome{act: actPass}
			}
		} else {
			e.markHostLocked(f)
		}
	}
	if act == actReflect {
		lport := e.opts.ListenerPort
		if tcp && k.dst.Port() == 53 {
			lport = e.opts.DNSPort
		}
		if !e.mapLocked(f, lport, now) {
			e.log.Warn("no free peer port to reflect a flow; refused", "src", k.src, "dst", k.dst)
			act, f.why = actRefuse, refusal.Limit
		}
	}
	switch act {
	case actPass:
		f.state = statePass
		e.st.passed.Add(1)
	case actReflect:
		f.state = stateReflect
		e.st.reflected.Add(1)
	case actDNS:
		f.state = stateDNS
	case actDrop:
		f.state = stateDrop
		e.st.droppedFlows.Add(1)
		e.refusedLocked(f)
	case actRelay:
		f.state = stateRelay
	case actRefuse:
		e.removeLocked(f, now)
		e.st.refused.Add(1)
		e.refusedLocked(f)
	}
	f.last = now
	return outcome{act: act, peer: f.peer, to: f.to, owner: f.owner, ownerKnown: f.ownerKnown}
}

// refusedLocked counts f, refused or dropped, under its reason.
// It also goes to the flow log for audits (never blocking).
func (e *Engine) refusedLocked(f *flow) {
	e.book.Add(f.why, refusal.Event{Src: f.key.src, Dst: f.key.dst, App: f.owner.App, Rule: f.verdict.Name})
	if a := e.opts.Audit; a != nil && a.On() {
		network := "udp"
		if f.key.proto == packet.ProtoTCP {
			network = "tcp"
		}
		a.Add(auditlog.Record{Time: e.clock.Now(), Event: auditlog.EventRefused, Network: network, Src: f.key.src,
			Dst: f.key.dst, App: f.owner.App, PID: int(f.owner.PID), Rule: f.verdict.Name,
			Action: f.verdict.Action.String(), Reason: f.why.String(), Profile: f.profile})
	}
}

// verdictLocked asks the policy about f (with its owner and the name behind its
// destination, when known) and turns the decision into what the engine does with the
// packets:
//
//   - the router's own processes pass;
//   - DNS: UDP is answered in process (dropped without Options.DNS), TCP reflected to the
//     DNS server's port (refused without Options.DNSPort);
//   - a refusal (a block rule, the host off limits, a fake IP nobody was given, DNS over TLS
//     not proxied, a caged flow no rule decides) refuses TCP with a RST and drops UDP,
//     once final;
//   - a fake-IP pool address is reflected for TCP (only the router can resolve or hand on
//     its name) and relayed for UDP (Options.UDP; dropped without it);
//   - direct passes (or is reflected with Options.ReflectDirect), once final, unless it
//     goes by name (policy.Decision.ByName: a fake IP; at the SYN no first bytes were read,
//     so a name they carry is the router's to judge, as the decision is not final while a
//     host-name rule could change it);
//   - anything else, or a decision a host-name rule could still change (not Final),
//     reflects TCP (the router decides with the name) and relays UDP (the router decides
//     again and sends it through an association; dropped without Options.UDP).
func (e *Engine) verdictLocked(pol *policy.Policy, f *flow) action {
	k := f.key
	tcp := k.proto == packet.ProtoTCP
	if f.pidKnown && e.own[f.pid] {
		return actPass
	}
	pf := e.queryLocked(f)
	f.profile = ""
	if e.opts.Profile != nil {
		if sub := e.opts.Profile(pol, &pf); sub != pol {
			pol, f.profile = sub, sub.ProfileName() // a switched guest's profile
		}
	}
	if isICMP(k.proto) {
		d := pol.DecideICMP(&pf)
		f.verdict, f.caged = d.Verdict, d.Caged
		if d.Action == rules.Direct {
			return actPass
		}
		f.why = refusal.ICMP
		return actDrop
	}
	d := pol.Decide(&pf)
	f.verdict, f.caged = d.Verdict, d.Caged
	switch {
	case d.Step == policy.StepDNS && !tcp:
		if e.opts.DNS == nil {
			f.why = refusal.DNS
			return actDrop
		}
		return actDNS
	case d.Step == policy.StepDNS:
		if e.opts.DNSPort == 0 {
			f.why = refusal.DNS
			return actRefuse
		}
		return actReflect
	case d.Action == rules.Block && d.Final:
		f.why = refusal.ForStep(d.Step)
		if tcp {
			return actRefuse
		}
		return actDrop
	case !tcp:
		if d.Action == rules.Direct && d.Final && !d.ByName {
			return actPass
		}
		if e.opts.UDP != nil {
			return actRelay
		}
		// UDP the engine cannot carry without a relay: proxied, to a fake IP, or not yet final.
		f.why = refusal.GuestUDP
		if !d.Caged {
			f.why = refusal.LocalUDP
		}
		return actDrop
	case d.Action == rules.Direct && d.Final && !e.opts.ReflectDirect && !d.ByName:
		return actPass
	}
	return actReflect
}

// queryLocked is what the policy decides f on: its addresses, its owner when known, and the
// name behind its destination when Options.Names knows it (not for ICMP).
func (e *Engine) queryLocked(f *flow) policy.Flow {
	k := f.key
	pf := policy.Flow{Network: rules.UDP, Src: k.src.Addr(), Dst: k.dst.Addr(), Port: k.dst.Port()}
	if k.proto == packet.ProtoTCP {
		pf.Network = rules.TCP
	}
	if f.ownerKnown {
		pf.Owner = f.owner
	}
	if isICMP(k.proto) {
		pf.Network, pf.Port = rules.AnyNetwork, 0
		return pf
	}
	if e.opts.Names != nil {
		if n, ok := e.opts.Names.NameFor(k.dst.Addr()); ok {
			pf.Host = n
		}
	}
	return pf
}

// EndRefused decides again the flows the engine decided itself that of selects (asked with
// the engine's Policy and what the flow was decided on; nil: every flow), with the current
// Policy and the profile Options.Profile picks now: after a reload (SetPolicy), or a switch
// of a guest's profile. A flow the engine passed that the new decision refuses leaves the
// table, counted as refused under the new reason (and in the flow log), so that the app's
// next packet of it is refused (TCP: a RST, as for a packet of no known flow; UDP: its next
// datagram is a new flow, decided and dropped). The new decision does not move a passed
// flow into the router: one it would proxy goes on, as the router's relayed flows that stay
// allowed do. A UDP flow the engine dropped leaves the table too, so that its next datagram
// is decided anew. The flows reflected or relayed to the router are the router's to decide
// again (router.Router.Use, SwitchProfile); pending ones are decided by the new policy when
// their owner is known; the connections AllowExisting let live, never decided, are left
// alone. Returns how many passed flows it ended.
func (e *Engine) EndRefused(of func(p *policy.Policy, f *policy.Flow) bool) int {
	pol := e.pol.Load()
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, f := range e.flows {
		if f.state != statePass && f.state != stateDrop || f.verdict.Name == "" {
			continue // reflected, relayed, DNS, pending; or passed undecided (AllowExisting, a SYN-ACK the host sends)
		}
		if of != nil {
			if pf := e.queryLocked(f); !of(pol, &pf) {
				continue
			}
		}
		if f.state == stateDrop {
			e.removeLocked(f, now)
			continue
		}
		if act := e.verdictLocked(pol, f); act != actRefuse && act != actDrop {
			continue
		}
		e.removeLocked(f, now)
		e.st.refused.Add(1)
		e.refusedLocked(f)
		n++
	}
	return n
}
