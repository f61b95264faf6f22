package daemon

import (
	"net/netip"
	"os"
	"time"

	"github.com/agentcage/router/control"
	"github.com/agentcage/router/rules"
)

// GuardStatus is what a platform knows of its guard's health while the daemon runs.
type GuardStatus struct {
	// Restores counts the times the guard was found changed by someone else and restored;
	// LastRestore is when the last one happened and LastDamage what was found.
	Restores    int
	LastRestore time.Time
	LastDamage  string
}

// guardReporter is a Platform that watches its guard (Linux).
type guardReporter interface{ GuardStatus() GuardStatus }

// statusHandler answers the control channel from the running daemon.
type statusHandler struct {
	d       *daemon
	started time.Time
}

var _ control.Handler = (*statusHandler)(nil)

func (h *statusHandler) Status() control.Status {
	h.d.mu.Lock()
	cfg := h.d.cfg
	h.d.mu.Unlock()
	st := control.Status{Started: h.started, Config: cfg.File, PID: os.Getpid()}
	if g, ok := h.d.opts.Platform.(guardReporter); ok {
		gs := g.GuardStatus()
		st.Guard = control.GuardStat{Watched: true, Restores: gs.Restores, LastRestore: gs.LastRestore, LastDamage: gs.LastDamage}
	}
	b := h.d.r.Budgets()
	st.Budgets = control.BudgetStat{Flows: b.Flows, FlowBudget: b.FlowBudget, Setups: b.Setups, SetupWaiting: b.SetupWaiting,
		Forwards: b.Forwards, ForwardBudget: b.ForwardBudget}
	hits, flows := h.d.r.Status()
	for _, rh := range hits {
		rs := control.RuleStat{Index: rh.Index + 1, Name: rh.Rule.Name, Action: rh.Rule.Action.String(), Hits: rh.Hits}
		if rh.Rule.Action == rules.Proxy {
			rs.Proxy = rh.Rule.Proxy
		}
		st.Rules = append(st.Rules, rs)
	}
	for _, f := range flows {
		st.Flows = append(st.Flows, control.FlowStat{ID: f.ID, Src: f.Src, Dst: f.Dst, Host: f.Host, App: f.App,
			Rule: f.Verdict.Name, Action: f.Verdict.Action.String(), Proxy: f.Verdict.Proxy, Age: f.Age})
	}
	st.DNS.Mode = h.d.dns.Mode().String()
	if ps, ok := h.d.dns.PoolStats(); ok {
		st.DNS.Pool, st.DNS.PoolSize, st.DNS.Mapped, st.DNS.InUse = ps.Prefix.String(), ps.Size, ps.Mapped, ps.InUse
	}
	return st
}

func (h *statusHandler) NameFor(a netip.Addr) (string, bool, bool) {
	name, ok := h.d.dns.NameFor(a)
	return name, h.d.dns.InPool(a), ok
}
