package router

import (
	"slices"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// A reload takes effect on live flows: Use decides every running flow again with the new
// policy (what it was decided on is kept in FlowRecord.query), and ends those the new rules
// refuse, TCP and UDP alike: a relayed TCP flow is cut (both ends closed: the relay's
// errCut), a UDP flow is ended (its next datagram is a new flow, decided by the new rules
// and dropped). An inbound whose allow list a reload narrowed ends the tunnels of the
// clients it no longer allows (EndInboundClients). Each ended flow is counted as a
// refusal under the new decision's reason (forward-source for an inbound's client), and
// the reload logs one line per rule (or inbound) with the number of flows it ended.
//
// A TCP flow being set up at the reload (connecting) is stopped too: its relay ends it as it
// starts. One still being decided gets the new policy or is ended by the next reload. A
// direct flow that went to its own address is ended too when the new rules would dial the
// name its first bytes carry instead (nowByName).

// endRefused ends the live flows that p refuses (see above), those of guest (a guestOf key)
// only unless it is "", each decided by its guest's profile (profile.go), and returns how
// many it ended; msg heads the log lines. Use calls it, and a profile switch.
func (r *Router) endRefused(p *compiled, guest, msg string) int {
	byRule := map[string]int{}
	n := 0
	for _, f := range r.liveTCP() {
		q := f.query
		if guest != "" && !r.ofGuest(p, &q, guest) {
			continue
		}
		d := r.forGuest(p, &q).Decision.Decide(&q)
		if admits(d) && !nowByName(f, d) {
			continue
		}
		f.bytes.stop()
		byRule[d.Verdict.Name]++
		n++
		r.book.Add(refusal.ForStep(d.Step), refusal.Event{Src: f.Src, Dst: f.Dst, Host: f.Host, App: f.App, Rule: d.Verdict.Name})
	}
	t := &r.udp
	t.mu.Lock()
	var ended []*udpFlow
	for _, fl := range t.flows {
		if fl.drop || fl.resolving || fl.ended {
			continue
		}
		q := fl.rec.query
		if guest != "" && !r.ofGuest(p, &q, guest) {
			continue
		}
		if d := r.forGuest(p, &q).Decision.Decide(&q); !admits(d) {
			byRule[d.Verdict.Name]++
			r.book.Add(refusal.ForStep(d.Step), refusal.Event{Src: fl.rec.Src, Dst: fl.rec.Dst, Host: fl.rec.Host, App: fl.rec.App, Rule: d.Verdict.Name})
			ended = append(ended, fl)
		}
	}
	for _, fl := range ended {
		if fl.rec.Err == nil {
			fl.rec.Err = errCut
		}
		r.endFlowLocked(fl)
	}
	t.mu.Unlock()
	n += len(ended)
	r.logEnded(byRule, "rule", msg)
	return n
}

// nowByName reports whether f went direct to its own address while d, the new policy's
// decision for it, would dial its name instead (policy.Decision.ByName: the name of its
// first bytes now wins a direct rule the address alone does not): the name may not keep
// the address it never picked, so the reload ends the flow as refused.
func nowByName(f *FlowRecord, d policy.Decision) bool {
	return f.Verdict.Action == rules.Direct && !f.byName && d.Action == rules.Direct && d.ByName
}

// EndInboundClients ends the tunnels of inbound name whose client in no longer allows (a
// reload narrowed its allow list), counted as forward-source refusals and logged once.
func (r *Router) EndInboundClients(in *Inbound) {
	n := 0
	for _, f := range r.liveTCP() {
		if f.Inbound != in.Name || in.allowed(f.Src.Addr()) {
			continue
		}
		f.bytes.stop()
		n++
		r.book.Add(refusal.ForwardSource, refusal.Event{Src: f.Src, Dst: in.Listen, Rule: "inbound " + in.Name})
	}
	if n > 0 {
		r.logEnded(map[string]int{in.Name: n}, "inbound", "reload ended live flows")
	}
}

// liveTCP returns the decided TCP flows running now, relayed or being set up (a flow
// stopped before its relay starts is ended as the relay starts). Forward flows (never
// decided by the rules: pol nil) are not among them.
func (r *Router) liveTCP() []*FlowRecord {
	r.live.mu.Lock()
	defer r.live.mu.Unlock()
	out := make([]*FlowRecord, 0, len(r.live.m))
	for _, f := range r.live.m {
		if f.pol != nil && f.query.Network == rules.TCP {
			out = append(out, f)
		}
	}
	return out
}

// logEnded logs one line per rule (or inbound) of the flows a reload ended, headed msg.
func (r *Router) logEnded(by map[string]int, what, msg string) {
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		r.log.Warn(msg, what, n, "flows", by[n])
	}
}
