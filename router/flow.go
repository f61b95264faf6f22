package router

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/agentcage/router/policy"
	"github.com/agentcage/router/refusal"
	"github.com/agentcage/router/rules"
)

// The set-up of a TCP flow, shared by the listeners that take flows: the transparent listener
// (a redirected connection: handle, which classifies it first) and the inbounds (a client that
// asked an explicit proxy: serveInbound, which reads its request first). Each builds the
// policy.Flow it knows, then both go through the same steps:
//
//	newFlow    the record that is logged when the flow ends, and shown by status meanwhile
//	           (with its bytes as the relay moves them); counted in the totals
//	names      the name behind an address, from the DNS side (fake IP, or seen in an answer)
//	open       decide (policy.Decide, counted) and, unless refused, connect (dial: direct or
//	           through the upstream, with the client's first bytes)
//	relayFlow  both connections to the relay, which ends the flow when both directions ended
//	endFlow    or the end of a flow that was refused or failed before the relay
//
// What differs stays with the listener: how a refusal or a failure is told to the client (a
// TCP reset; a SOCKS5 or HTTP answer), and where the client's first bytes are (early).

// early is where a flow's first client bytes are when it is connected: still in the client's
// socket (the transparent listener: they are read only for a proxy, which sends them along
// with its request; a direct connection leaves them to the relay), or already read by the
// listener (an inbound's request reader buffered them: at most earlyMax bytes), which every
// connection then delivers first.
type early struct {
	sock *net.TCPConn
	read []byte
}

// newFlow starts the record of a flow from src.
func (r *Router) newFlow(src netip.AddrPort) *Flow {
	r.count.flows.Add(1)
	return &Flow{ID: r.nextID.Add(1), Start: time.Now(), Src: src, index: -1}
}

// names fills pf.Host from the DNS side when pf has an address and no name: the name behind a
// fake IP, held until release is called, or a name seen in a DNS answer (proxy mode). release
// is nil when nothing is held. A fake IP nobody was given stays nameless, and the policy
// refuses it (StepNoName): only the name could route it.
func (r *Router) names(pf *policy.Flow) (release func()) {
	n := r.opts.Names
	if n == nil || pf.Host != "" || !pf.Dst.IsValid() {
		return nil
	}
	if n.InPool(pf.Dst) {
		if name, rel, ok := n.Acquire(pf.Dst); ok {
			pf.Host, release = name, rel
		}
	} else if name, ok := n.NameFor(pf.Dst); ok {
		pf.Host = name
	}
	return release
}

// open decides the flow pf under p and, unless the decision refuses it, takes its set-up
// slots (admission: refused when none comes free in time) and connects it. f is the
// flow's record: its verdict, proxy, bytes sent up and error are filled in, and it is shown by
// status from the decision on (endFlow or the relay takes it out). It returns the decision and
// the connection to the destination; for a refused flow the connection and the error are nil;
// for a failed one the error is returned and kept in f.Err. Nothing is ever sent direct
// because a proxy failed.
func (r *Router) open(ctx context.Context, p *compiled, f *Flow, pf *policy.Flow, e early) (policy.Decision, net.Conn, error) {
	d := p.Decision.Decide(pf)
	if d.Action != rules.Block && d.Step != policy.StepDNS {
		// Set-up slots, shared fairly by source, and what the name resolves to when the
		// policy asks (a caged flow that would leave from this machine by its name).
		endSetup, err := r.setup(ctx, p, sourceKey(pf, p), pf)
		if err != nil {
			f.Err, f.Verdict = err, admissionVerdict
			r.refused(refusal.Limit, f)
			return d, nil, err
		}
		defer endSetup()
		if pf.Resolved != nil {
			d = p.Decision.Decide(pf) // with what the name resolves to
		}
	}
	f.Verdict, f.Step, f.pol, f.index = d.Verdict, d.Step, p, d.Index
	p.count(d)
	if d.Action == rules.Block || d.Step == policy.StepDNS {
		// A DNS flow belongs to the DNS server: one that reaches a listener (a capture
		// fault, or a client asking an inbound for port 53) is refused, never sent anywhere.
		r.refused(refusal.ForStep(d.Step), f)
		return d, nil, nil
	}
	r.live.add(f)
	out, err := r.dial(ctx, p, f, d, pf, e)
	if err != nil {
		f.Err = err
		if d.Action == rules.Proxy && upstreamDown(err) {
			r.refused(refusal.UpstreamDown, f)
		}
		return d, nil, err
	}
	r.logOpen(f)
	return d, out, nil
}

// relayFlow hands a connected flow to the relay, which owns client and out from then on. When
// the flow ends, the relay's callback takes it out of status, calls release (nil: nothing
// held), logs it and marks it done (r.flows), without ever blocking the relay.
func (r *Router) relayFlow(p *compiled, f *Flow, client *net.TCPConn, out net.Conn, release func()) {
	rl := r.relayFor(p)
	f.relayed = true
	rl.start(client, out, &f.bytes, func(res result) {
		// On the relay's goroutine: nothing here may block.
		f.Up, f.Down, f.Err = f.Up+res.up, res.down, res.err
		r.finish(f)
		if release != nil {
			release()
		}
		if !r.log.Enabled(context.Background(), flowLevel(f)) {
			r.flows.Done()
			return
		}
		go func() {
			r.logFlow(f) // a slow log writer must not stall the relay
			r.flows.Done()
		}()
	})
}

// endFlow ends a flow that was refused or failed before the relay: it takes it out of status,
// calls release (nil: nothing held), logs it and marks it done (r.flows). The listener has
// told the client already.
func (r *Router) endFlow(f *Flow, release func()) {
	r.finish(f)
	if release != nil {
		release()
	}
	r.logFlow(f)
	r.flows.Done()
}
