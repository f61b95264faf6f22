package router

// The flow record and its log: one record per connection, logged when the flow opens and when
// it ends, at a level by its outcome, and rate-limited for refusals (refusals, status_refusals.go).

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// FlowRecord is what the router knows of one connection; it is logged when the flow ends.
type FlowRecord struct {
	ID   uint64
	Src  netip.AddrPort
	Dst  netip.AddrPort // the original destination; its address is invalid when only Host is known
	Host string         // the destination's name, when known
	// NameFrom is where Host came from: "dns" (the fake IP's name, or a name seen in a DNS
	// answer for the address), "sni" (the TLS ClientHello's server name), "host" (the
	// HTTP/1 Host header); "" when Host is empty or an inbound's client asked for it.
	NameFrom string
	// NameUntrusted: Host came from the flow's first bytes and won a direct verdict on an
	// address the client chose, so the router dialed Host as its resolver resolves it, or
	// refused the flow (policy.Decision.Untrusted).
	NameUntrusted bool
	// Dialed is the address a direct flow by name connected to (policy.Decision.ByName);
	// zero otherwise (a direct flow goes to Dst).
	Dialed  netip.AddrPort
	Inbound string // the inbound that took the flow; "" for a captured one
	Caged   bool   // the policy found the flow caged
	// Owner is the flow's process as the capture found it (a carried flow: its client's);
	// the zero Owner when unknown.
	rules.Owner
	Verdict rules.Verdict
	Step    policy.Step // what decided: a rule, or an implicit step
	Via     string      // the proxy that carried it (a failover list's member)
	Asked   string      // a flow held under ask: the answer (ask.Answer's name); "" when not asked
	Up      int64       // bytes client → destination
	Down    int64
	Start   time.Time
	Err     error

	bytes   meter     // live, as the relay moves them
	rate    sample    // guarded by Router.live.mu
	pol     *compiled // the policy that decided it (nil: a forward, or not decided)
	index   int       // the rule that decided it, -1 for an implicit step
	relayed bool      // the flow reached the relay; set before the relay starts
	byName  bool      // the decision's ByName: a direct flow dialed its name, not Dst
	udp     bool      // a UDP flow (for the flow log)
	// refused and why: the flow was counted as refused (Router.refused), for the flow log.
	refused bool
	why     refusal.Reason
	// query is what the flow was decided on, kept so that a reload can decide it again
	// (reload.go); set before the decision is recorded.
	query policy.Flow
	// gate is set when the flow is to be served by a forward's HTTP gate (forward_gate.go).
	gate *gated
	// broker is set when the flow goes to a brokered destination (flow_credential.go).
	broker *brokerFlow
}

// Audit returns the flow log for audits the router writes to (Options.Audit; nil: none), for
// a capture that refuses flows before they reach the router (the Windows engine).
func (r *Router) Audit() *auditlog.Log { return r.opts.Audit }

// audit queues f's record in the flow log for audits (Options.Audit), when one is open: a
// refusal, or the end of a flow. It never blocks (auditlog.Log.Add).
func (r *Router) audit(f *FlowRecord) {
	a := r.opts.Audit
	if a == nil || !a.On() {
		return
	}
	rec := auditlog.Record{Time: time.Now(), Event: auditlog.EventFlow, ID: f.ID, Network: "tcp", Src: f.Src,
		App: f.App, PID: f.PID, Inbound: f.Inbound, Caged: f.Caged, Name: f.Host, NameFrom: f.NameFrom,
		NameUntrusted: f.NameUntrusted, Dialed: f.Dialed,
		Rule: f.Verdict.Name, Action: f.Verdict.Action.String(), Upstream: f.Via,
		Up: f.Up, Down: f.Down, Duration: time.Since(f.Start)}
	if f.udp {
		rec.Network = "udp"
	}
	if f.Dst.Addr().IsValid() {
		rec.Dst = f.Dst
	} else {
		rec.DstPort = f.Dst.Port()
	}
	if rec.Upstream == "" {
		rec.Upstream = f.Verdict.Proxy
	}
	rec.Asked = f.Asked
	if f.pol != nil {
		rec.Profile = f.pol.profile
	}
	if f.refused {
		rec.Event, rec.Reason = auditlog.EventRefused, f.why.String()
	}
	if f.Err != nil && !errors.Is(f.Err, errIdle) {
		rec.Error = f.Err.Error()
	}
	a.Add(rec)
}

// dst is f's destination for logs and status: the address and port, or the name and port
// when only the name is known.
func (f *FlowRecord) dst() string {
	if !f.Dst.Addr().IsValid() {
		return net.JoinHostPort(f.Host, strconv.Itoa(int(f.Dst.Port())))
	}
	return f.Dst.String()
}

// flowLevel is the level of f's record: warn for a flow that failed, info otherwise.
func flowLevel(f *FlowRecord) slog.Level {
	if f.Err != nil && !errors.Is(f.Err, errIdle) {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// flowAttrs are the attributes of f's log records.
func flowAttrs(f *FlowRecord, ended bool) []any {
	attrs := make([]any, 0, 24)
	attrs = append(attrs, "id", f.ID, "src", f.Src, "dst", f.dst(),
		"rule", f.Verdict.Name, "action", f.Verdict.Action.String())
	if f.pol != nil && f.pol.profile != "" {
		attrs = append(attrs, "profile", f.pol.profile)
	}
	if ended {
		attrs = append(attrs, "up", f.Up, "down", f.Down, "duration", time.Since(f.Start).Round(time.Millisecond))
	}
	if f.Host != "" {
		attrs = append(attrs, "host", f.Host)
		if f.NameFrom != "" {
			attrs = append(attrs, "name_from", f.NameFrom)
		}
	}
	if f.NameUntrusted {
		attrs = append(attrs, "name_untrusted", true)
	}
	if f.Dialed.IsValid() {
		attrs = append(attrs, "dialed", f.Dialed)
	}
	if f.App != "" {
		attrs = append(attrs, "app", f.App, "pid", f.PID)
	}
	if len(f.Services) > 0 {
		attrs = append(attrs, "services", strings.Join(f.Services, ","))
	}
	if f.Inbound != "" {
		attrs = append(attrs, "inbound", f.Inbound)
	}
	if f.Asked != "" {
		attrs = append(attrs, "asked", f.Asked)
	}
	if f.Via != "" {
		attrs = append(attrs, "proxy", f.Via)
	} else if f.Verdict.Proxy != "" {
		attrs = append(attrs, "proxy", f.Verdict.Proxy)
	}
	return attrs
}

// logOpen records a flow that was decided and connected, as its relay starts ("flow open");
// the record of its end ("flow") follows with the bytes.
func (r *Router) logOpen(f *FlowRecord) {
	if r.log.Enabled(context.Background(), slog.LevelInfo) {
		r.log.Info("flow open", flowAttrs(f, false)...)
	}
}

// summaryReason names why f was refused or failed before the relay, for the summary of refusals;
// "" for a flow that was relayed (its end is logged one by one).
func summaryReason(f *FlowRecord) string {
	switch {
	case f.relayed:
		return ""
	case f.Err == nil && f.Verdict.Action == rules.Block:
		return "refused by " + f.Verdict.Name
	case f.Err == nil:
		return ""
	}
	for _, e := range []error{errOverShare, errOverBudget, errDstBusy, errBusy, errNoSlot} {
		if errors.Is(f.Err, e) {
			return e.Error()
		}
	}
	return "failed before the relay"
}

// logFlow records a flow's end: its decision, bytes each way, duration and error. Refused
// and failed flows go through the refusal summary: only the first few of each reason in an
// interval are logged one by one.
func (r *Router) logFlow(f *FlowRecord) {
	if r.flowLogged(f) {
		r.writeFlow(f)
	}
}

// flowLogged counts f in the refusal summary when it was refused or failed, and reports
// whether its end is to be logged one by one (and the log takes records of its level). It is
// called once per flow.
func (r *Router) flowLogged(f *FlowRecord) bool {
	if reason := summaryReason(f); reason != "" && !r.refuse.note(reason, f.Src.Addr().String()) {
		return false
	}
	// The record's attributes cost more than the rest of a short flow's end.
	return r.log.Enabled(context.Background(), flowLevel(f))
}

// writeFlow writes the record of f's end.
func (r *Router) writeFlow(f *FlowRecord) {
	attrs := flowAttrs(f, true)
	if f.Err != nil && !errors.Is(f.Err, errIdle) {
		attrs = append(attrs, "err", f.Err.Error())
		r.log.Warn("flow", attrs...)
		return
	}
	if errors.Is(f.Err, errIdle) {
		attrs = append(attrs, "end", "idle")
	}
	r.log.Info("flow", attrs...)
}
