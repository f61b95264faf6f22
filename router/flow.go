package router

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
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
func (r *Router) newFlow(src netip.AddrPort) *FlowRecord {
	f := new(FlowRecord)
	r.startFlow(f, src)
	return f
}

// startFlow starts the record f (zero) of a flow from src, counted in the totals.
func (r *Router) startFlow(f *FlowRecord, src netip.AddrPort) {
	r.count.flows.Add(1)
	f.ID, f.Start, f.Src, f.index = r.nextID.Add(1), time.Now(), src, -1
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
//
// A flow the policy sends to a model gate (compiled.gate) is not connected: open returns
// no connection and no error, and f.gate set; the caller hands the client to serveGate.
//
// A flow the policy asks about (action Ask) is held here first (ask, flow_ask.go) and goes on
// approved as a proxied flow, or refused.
//
// The Linux event loop sets most transparent flows up itself, with the same steps: Decide,
// admits, trySetup in place of setup, decided, its own connect, failed; it hands an asked
// flow to a goroutine.
func (r *Router) open(ctx context.Context, p *compiled, f *FlowRecord, pf *policy.Flow, e early) (policy.Decision, net.Conn, error) {
	r.canary(p, f, pf, "", nil) // a name an inbound's client asked for, or the fake IP's
	d := p.Decision.Decide(pf)
	asked := d.Action == rules.Ask
	if asked {
		d = r.ask(ctx, p, f, pf, d) // held: nothing dialled until an answer
	}
	if admits(d) {
		// Set-up slots, shared fairly by source, and what the name resolves to when the
		// policy asks (a caged flow that would leave from this machine by its name).
		endSetup, err := r.setup(ctx, p, sourceKey(pf, p), pf)
		if err != nil {
			r.notAdmitted(f, err)
			return d, nil, err
		}
		defer endSetup()
		if pf.Resolved != nil {
			d = reapprove(p.Decision.Decide(pf), asked) // with what the name resolves to
		}
	}
	f.query = *pf
	if r.overUpload(p, f, pf, d) {
		return d, nil, errOverUpload
	}
	if !r.decided(p, f, d) {
		return d, nil, nil
	}
	if fw, ok := p.gate(pf, d); ok {
		f.gate = &gated{fw: fw} // the caller serves it (serveGate): nothing is dialled
		return d, nil, nil
	}
	if dest, ok := p.brokered(pf, d); ok {
		// Read request by request (flow_credential.go): nothing is sent with the dial.
		f.broker, e = &brokerFlow{dest: dest, first: bytes.Clone(e.read)}, early{}
	}
	out, err := r.dial(ctx, p, f, d, pf, e)
	if err != nil {
		r.failed(f, d, err)
		return d, nil, err
	}
	r.logOpen(f)
	return d, out, nil
}

// admits reports whether d lets a flow be set up: neither refused nor a DNS flow (which
// belongs to the DNS server: one that reaches a listener, a capture fault or a client asking
// an inbound for port 53, is refused, never sent anywhere).
func admits(d policy.Decision) bool { return d.Action != rules.Block && d.Step != policy.StepDNS }

// notAdmitted records a flow the set-up admission refused (no slot, its destination busy).
func (r *Router) notAdmitted(f *FlowRecord, err error) {
	f.Err, f.Verdict = err, admissionVerdict
	r.refused(refusal.Limit, f)
}

// decided records d as f's decision, counted under its rule or step. A flow d refuses is
// counted among the refusals (false); one it admits is shown by status from now on, and
// counted against its upload budget when relayed (true). f.query is set.
func (r *Router) decided(p *compiled, f *FlowRecord, d policy.Decision) bool {
	f.Verdict, f.Step, f.pol, f.index, f.Caged = d.Verdict, d.Step, p, d.Index, d.Caged
	f.NameUntrusted, f.byName = d.Untrusted, d.ByName
	p.count(d)
	r.caged.note(f, d)
	if !admits(d) {
		why := refusal.ForStep(d.Step)
		if f.Inbound != "" {
			why = refusal.ForInbound(d.Step)
		}
		r.refused(why, f)
		return false
	}
	f.bytes.upload = r.uploadFlow(p, f)
	r.live.add(f)
	return true
}

// failed records why an admitted flow could not be connected: a proxied flow that no
// upstream carried counts as refused for its upstream being down.
func (r *Router) failed(f *FlowRecord, d policy.Decision, err error) {
	f.Err = err
	if d.Action == rules.Proxy && upstreamDown(err) {
		r.refused(refusal.UpstreamDown, f)
	}
}

// relayFlow hands a connected flow to the relay, which owns client and out from then on. When
// the flow ends, the relay's callback takes it out of status, calls release (nil: nothing
// held), logs it and marks it done (r.flows), without ever blocking the relay.
func (r *Router) relayFlow(p *compiled, f *FlowRecord, client *net.TCPConn, out net.Conn, release func()) {
	f.relayed = true
	f.bytes.upload.Add(f.Up) // the first bytes, sent with the set-up: counted (the relay cuts)
	if f.broker != nil {
		go r.relayBrokered(p, f, client, out, release)
		return
	}
	rl := r.relayFor(p)
	rl.start(client, out, &f.bytes, r.relayed(f, release))
}

// relayed is the relay's callback for f: it ends the flow (see relayFlow). It runs on the
// relay's goroutine (an epoll loop): nothing in it may block.
func (r *Router) relayed(f *FlowRecord, release func()) func(result) {
	return func(res result) {
		f.Up, f.Down, f.Err = f.Up+res.up, res.down, res.err
		if errors.Is(res.err, errOverUpload) {
			r.refused(refusal.Budget, f)
		}
		r.finish(f)
		if release != nil {
			release()
		}
		r.logLater(f, false)
	}
}

// endFlow ends a flow that was refused or failed before the relay: it takes it out of status,
// calls release (nil: nothing held), logs it and marks it done (r.flows). The listener has
// told the client already.
func (r *Router) endFlow(f *FlowRecord, release func()) {
	r.finish(f)
	if release != nil {
		release()
	}
	r.logFlow(f)
	r.flows.Done()
}

// flowLog writes flow records on a goroutine of its own, in the order they were queued, so
// that neither the relay nor an event loop ever waits for the log's writer, and a flow's
// "flow open" always comes before its "flow". The goroutine runs while records are queued
// and ends when none are. mu guards every field.
type flowLog struct {
	mu      sync.Mutex
	queue   []flowRecord
	running bool
}

type flowRecord struct {
	f    *FlowRecord
	open bool // "flow open"; otherwise the flow's end, after which it is marked done
}

// logLater queues f's "flow open" record (open) or its end's, when it is to be written at
// all; a flow's end marks it done (r.flows) once its record is written, or at once without
// one.
func (r *Router) logLater(f *FlowRecord, open bool) {
	if open && !r.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	if !open && !r.flowLogged(f) {
		r.flows.Done()
		return
	}
	l := &r.flowLog
	l.mu.Lock()
	l.queue = append(l.queue, flowRecord{f: f, open: open})
	start := !l.running
	l.running = true
	l.mu.Unlock()
	if start {
		go r.writeFlowLog()
	}
}

// writeFlowLog writes the queued records until none are left.
func (r *Router) writeFlowLog() {
	l := &r.flowLog
	var batch []flowRecord
	for {
		l.mu.Lock()
		if len(l.queue) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		batch, l.queue = l.queue, batch[:0]
		l.mu.Unlock()
		for i, rec := range batch {
			if rec.open {
				r.log.Info("flow open", flowAttrs(rec.f, false)...)
			} else {
				r.writeFlow(rec.f)
				r.flows.Done()
			}
			batch[i] = flowRecord{}
		}
	}
}
