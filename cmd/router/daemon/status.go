package daemon

import (
	"net/netip"
	"os"
	"time"

	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
)

// statusHandler answers the control channel from the running daemon.
type statusHandler struct {
	d       *daemon
	started time.Time
}

var _ control.Handler = (*statusHandler)(nil)

func (h *statusHandler) Status() control.Status { return h.status(true) }

// consoleHandler is statusHandler for the web console, which polls the status every second
// and shows no kernel cage: its Status leaves out the uncaged-hypervisor scan (a walk of
// every process of the host, whose cost grows with the host's processes, not the router's
// flows) and its warnings.
type consoleHandler struct{ *statusHandler }

func (c consoleHandler) Status() control.Status { return c.status(false) }

// status is the daemon's status; kernel: with the kernel cage's processes (KernelCaged)
// and the warnings of that scan.
func (h *statusHandler) status(kernel bool) control.Status {
	h.d.mu.Lock()
	cfg := h.d.cfg
	running := h.d.runningLocked()
	h.d.mu.Unlock()
	st := buildStatus(h.started, cfg.File, h.d.r, h.d.dns,
		refusal.Merge(h.d.book.Snapshot(), h.d.opts.Platform.Refusals()))
	st.PID = os.Getpid()
	st.Running = running
	if g, ok := h.d.opts.Platform.(capture.GuardReporter); ok {
		gs := g.GuardStatus()
		st.Guard = control.GuardStat{Watched: gs.Watched, Restores: gs.Restores, LastRestore: gs.LastRestore, LastDamage: gs.LastDamage,
			Rivals: gs.Rivals, GuardedApps: gs.GuardedApps, Unguarded: gs.Unguarded}
	}
	if kc, ok := h.d.opts.Platform.(capture.KernelCager); ok && kernel {
		caged, warns := kc.KernelCaged()
		st.KernelCaged = caged
		st.Warnings = append(st.Warnings, warns...)
	}
	st.Asks = h.Pending()
	profileStatus(&st, h.d.r)
	b := h.d.r.Budgets()
	st.Budgets = control.BudgetStat{Flows: b.Flows, FlowBudget: b.FlowBudget, Setups: b.Setups, SetupWaiting: b.SetupWaiting,
		Forwards: b.Forwards, ForwardBudget: b.ForwardBudget, Inbounds: b.Inbounds, InboundBudget: b.InboundBudget}
	return st
}

// buildStatus puts the router's counters, the refusals and the DNS side into the control
// channel's Status.
func buildStatus(started time.Time, file string, r *router.Router, d *dns.Server, refused []refusal.Stat) control.Status {
	rs := r.Status()
	st := control.Status{Started: started, Config: file, Totals: control.Totals{
		Flows: rs.Totals.Flows, Live: rs.Totals.Live, Up: rs.Totals.Up, Down: rs.Totals.Down,
	}}
	for _, rh := range rs.Rules {
		row := control.RuleStat{Index: rh.Index + 1, Name: rh.Rule.Name, Action: rh.Rule.Action.String(), Hits: rh.Hits, Bytes: rh.Bytes, Disabled: rh.Rule.Disabled}
		if rh.Rule.Action == rules.Proxy {
			row.Proxy = rh.Rule.Proxy
		}
		st.Rules = append(st.Rules, row)
	}
	st.Refusals = make([]control.RefusalStat, 0, len(refused))
	for _, rf := range refused {
		row := control.RefusalStat{Reason: rf.Reason.String(), Count: rf.Count}
		for _, e := range rf.Recent {
			row.Recent = append(row.Recent, control.Refused{At: e.At, Src: addrText(e.Src), Dst: addrText(e.Dst), Host: e.Host, App: e.App, Rule: e.Rule, Request: e.Request})
		}
		st.Refusals = append(st.Refusals, row)
		st.Totals.Refused += rf.Count
	}
	for _, u := range r.UpstreamStatus() {
		st.Upstreams = append(st.Upstreams, control.UpstreamStat{Name: u.Name, State: u.State.String(), Since: u.Since,
			Failures: u.Failures, LastError: u.LastError, Latency: u.Latency})
	}
	st.Flows = make([]control.FlowStat, 0, len(rs.Flows))
	for _, f := range rs.Flows {
		st.Flows = append(st.Flows, control.FlowStat{ID: f.ID, Src: f.Src, Dst: f.Dst, Host: f.Host, NameFrom: f.NameFrom, Inbound: f.Inbound, App: f.App, PID: f.PID,
			Rule: f.Verdict.Name, Action: f.Verdict.Action.String(), Proxy: f.Verdict.Proxy, Via: f.Via, Age: f.Age,
			Up: f.Up, Down: f.Down, UpRate: f.UpRate, DownRate: f.DownRate})
	}
	for _, c := range rs.Caged {
		st.Caged = append(st.Caged, control.CagedStat{Name: c.Name, PID: c.PID, Flows: c.Flows, Refused: c.Refused, Last: c.Last})
	}
	for _, u := range r.UploadBudgets(control.MaxDomainBudgets) {
		st.DomainBudgets = append(st.DomainBudgets, control.DomainBudgetStat{Budget: control.BudgetBytesUp, Guest: u.Guest, Domain: u.Domain,
			Used: u.Used, Limit: u.Limit, Ends: u.Start.Add(u.Window), Over: u.Over})
	}
	for _, u := range d.NameBudgets(control.MaxDomainBudgets) {
		st.DomainBudgets = append(st.DomainBudgets, control.DomainBudgetStat{Budget: control.BudgetNames, Guest: u.Guest, Domain: u.Domain,
			Used: u.Used, Limit: u.Limit, Ends: u.Start.Add(u.Window), Over: u.Over})
	}
	st.DNS.Mode = d.Mode().String()
	if ps, ok := d.PoolStats(); ok {
		st.DNS.Pool, st.DNS.PoolSize, st.DNS.Mapped, st.DNS.InUse = ps.Prefix.String(), ps.Size, ps.Mapped, ps.InUse
	}
	return st
}

// addrText is an address for status; "" when there is none.
func addrText(a netip.AddrPort) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func (h *statusHandler) NameFor(a netip.Addr) (string, bool, bool) {
	name, ok := h.d.dns.NameFor(a)
	return name, h.d.dns.InPool(a), ok
}
