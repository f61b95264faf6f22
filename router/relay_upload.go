package router

import (
	"errors"
	"io"
	"strings"

	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/router/upload"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// The upload budget ([budget] bytes_up_per_domain, Options.Uploads): the bytes a guest's
// relayed TCP flows send up to one registrable domain in a window. The domain is the one
// of the name the flow was decided by (a fake IP's name, the name its first bytes carry
// once the router resolved it, an inbound client's requested name); a flow without a name
// counts under its destination address. The guest is the flow's budget key (sourceKey).
//
// Two places apply it, both on the flow's set-up, on every path alike:
//   - open (the goroutine path; the event loop hands a flow to it when its guest is past
//     the budget for the domain, and does not speculate its connect) refuses a new flow
//     past it (refusal.Budget);
//   - decided gives an admitted flow its counter (meter.upload), which the relay adds each
//     chunk it moves up to, before passing it on (a brokered flow, which the router copies
//     itself, each write: uploadCounted): the chunk that passes the budget is not sent, and
//     the flow ends with errOverUpload, both sockets reset.
//
// With over = "ask", Add blocks while the host's owner is asked, holding the chunk and so
// the flow: such a flow is set up on the goroutine path (uploadOffLoop) and relayed by
// copyRelay (relay.start), a goroutine per direction, never by the loops.
//
// With no budget Options.Uploads is nil, every flow's counter is nil, and the relay does
// no work for it beyond a nil check per chunk. A flow with a counter is not moved by the
// kernel (the sockmap), whose bytes the relay does not see: it is spliced by the loops (or
// copied), chunk by chunk.

// errOverUpload ends a flow whose guest is past its upload budget for the flow's domain.
var errOverUpload = errors.New("past its guest's budget of bytes up to the domain ([budget] bytes_up_per_domain)")

// uploadDomain is the domain pf's bytes up count under: its name's registrable domain, else
// its destination address.
func uploadDomain(pf *policy.Flow) string {
	if h := strings.TrimSuffix(strings.ToLower(pf.Host), "."); h != "" {
		return dns.Registrable(h)
	}
	return pf.Dst.Unmap().String()
}

// uploadCounted is w counted against f's upload budget, for the flows the router copies
// itself (a brokered destination's requests): a write that passes the budget is not made
// and fails with errOverUpload, and over reports since then that the flow is to be cut.
// Without a budget (f nil) it is w itself.
func uploadCounted(w io.Writer, f *upload.Flow) (counted io.Writer, over func() bool) {
	if f == nil {
		return w, func() bool { return false }
	}
	u := &uploadWriter{w: w, f: f}
	return u, func() bool { return u.cut }
}

type uploadWriter struct {
	w   io.Writer
	f   *upload.Flow
	cut bool
}

func (u *uploadWriter) Write(p []byte) (int, error) {
	if u.f.Add(int64(len(p))) {
		u.cut = true
		return 0, errOverUpload
	}
	return u.w.Write(p)
}

// uploadRefuses reports whether pf, from its guest, is refused for its upload budget.
func (r *Router) uploadRefuses(p *compiled, pf *policy.Flow) bool {
	b := r.opts.Uploads
	return b != nil && b.Refuses(sourceKey(pf, p), uploadDomain(pf))
}

// overUpload refuses f (decided d, to be admitted), counted under refusal.Budget, when
// its guest is past its upload budget for its domain.
func (r *Router) overUpload(p *compiled, f *FlowRecord, pf *policy.Flow, d policy.Decision) bool {
	if !admits(d) || !r.uploadRefuses(p, pf) {
		return false
	}
	f.Verdict, f.Step, f.Err = d.Verdict, d.Step, errOverUpload
	r.refused(refusal.Budget, f)
	return true
}

// uploadFlow returns the upload counter of f (its query set): nil without a budget.
func (r *Router) uploadFlow(p *compiled, f *FlowRecord) *upload.Flow {
	b := r.opts.Uploads
	if b == nil {
		return nil
	}
	return b.Flow(sourceKey(&f.query, p), uploadDomain(&f.query))
}

// UploadBudgets returns the upload budgets' counts in their current windows: the max
// largest (see upload.Budget.Uses); nil without a budget.
func (r *Router) UploadBudgets(max int) []upload.Use { return r.opts.Uploads.Uses(max) }
