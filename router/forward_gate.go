package router

import (
	"context"
	"errors"
	"net"
	"strconv"

	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// The model gate on every path: a caged flow the policy lets through direct to a model's
// address (policy.Policy.Gate: a user-space NAT's process connecting to a forward's connect
// address for its guest, a guest let through to the model's port by a direct rule, a
// client asking an inbound for it) is served by that forward's HTTP gate (package modelfwd),
// exactly as a connection accepted on the forward's listen socket: the same parsing,
// allow-list of calls, refusals (403, counted as model-api) and counting, and the forward's
// slots of its guest. It is never relayed as a raw pipe, unless the forward is one
// (api = "tcp"). The flow is decided, counted and shown by status as any transparent or
// inbound flow; the gate takes the client's connection from there, on the flow's goroutine
// (the event loops hand such a flow to the goroutine path).
//
// The gate's forward is not asked for its allow list: the rules let the flow through, and
// the forward's allow list is about who may reach its listen address.

// errNoGate is a flow whose gate names a forward the router does not serve (a config
// built in code): refused rather than passed raw.
var errNoGate = errors.New("its model gate's forward is not served")

// gate reports whether pf, decided d under p, meets a forward's HTTP gate
// (policy.Policy.Gate), and that forward's settings (nil when the router has no forward by
// that name: the flow must be refused).
func (p *compiled) gate(pf *policy.Flow, d policy.Decision) (*Forward, bool) {
	if p.Decision == nil {
		return nil, false
	}
	g, ok := p.Decision.Gate(pf, d)
	if !ok || g.Raw {
		return nil, false
	}
	for i := range p.Forwards {
		if f := &p.Forwards[i]; f.Name == g.Forward && f.API != nil {
			return f, true
		}
	}
	return nil, true
}

// serveGate serves the decided flow f (pf, under p) of client c at fw's gate, until the
// connection ends; first are the client's bytes already read (sent first). It ends the flow
// as the relay's end would: release, the record logged, r.flows marked done.
func (r *Router) serveGate(ctx context.Context, p *compiled, c *net.TCPConn, first []byte, fw *Forward, f *FlowRecord, pf *policy.Flow, release func()) {
	if fw == nil {
		f.Err = errNoGate
		r.refused(refusal.ModelAPI, f)
		reset(c)
		r.endFlow(f, release)
		return
	}
	guest := sourceKey(pf, p)
	if !r.adm.forwardTake(fw.Name, guest) {
		f.Err, f.Verdict = errOverShare, admissionVerdict
		r.refused(refusal.Limit, f)
		reset(c)
		r.endFlow(f, release)
		return
	}
	defer r.adm.forwardGive(fw.Name, guest)
	f.relayed = true
	self := f.Dst.String() // the address the client asked for: an absolute-form target must name it
	if !f.Dst.Addr().IsValid() {
		self = net.JoinHostPort(f.Host, strconv.Itoa(int(f.Dst.Port())))
	}
	log := r.log.With("forward", fw.Name, "src", f.Src, "dst", self, "connect", fw.Connect, "gate", "caged flow")
	// A reload whose rules refuse the flow ends it (endRefused), as it ends a relayed one.
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.bytes.watchCut(cancel)
	r.forwardHTTP(gctx, c, first, self, *fw, f, log)
	if release != nil {
		release()
	}
	r.flows.Done()
}

// gated is a flow's gate (FlowRecord.gate): the forward whose gate serves it (nil: none
// is served, the flow is refused).
type gated struct{ fw *Forward }
