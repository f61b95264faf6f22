package router

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// RuleHits is a rule and the flows it decided under the current policy, with their bytes
// (both ways, ended flows and the live ones so far).
type RuleHits struct {
	Index int // rule position; -1 for an implicit step (Rule.Name is the step's name)
	Rule  rules.Rule
	Hits  uint64
	Bytes uint64
}

// Totals count every flow since the Router was made, across reloads.
type Totals struct {
	Flows    uint64 // decided (refused ones included) and forwarded
	Live     int
	Up, Down uint64 // bytes of ended flows plus the live ones so far
}

// LiveFlow is a copy of a running flow: its decision, its bytes so far, and its rates in
// bytes per second over the interval since the previous measurement (at least rateWindow
// apart; the first is since the flow started).
type LiveFlow struct {
	ID       uint64
	Src      string
	Dst      string
	Host     string
	NameFrom string // where Host came from: "dns", "sni", "host" (FlowRecord.NameFrom)
	Inbound  string // the inbound that took it; "" for a captured flow
	App      string
	PID      int
	Verdict  rules.Verdict
	Via      string
	Age      time.Duration
	Up, Down uint64
	UpRate   uint64
	DownRate uint64
}

// Stats is what Status reports.
type Stats struct {
	Totals Totals
	Rules  []RuleHits
	Flows  []LiveFlow // oldest first
	// Caged are the caged processes of this host whose flows were decided, the one seen
	// last first.
	Caged []CagedProcess
}

// rateWindow is the shortest interval a flow's rate is measured over: Status calls closer
// together than this (two `router watch` at once) see the same rate.
const rateWindow = 900 * time.Millisecond

// liveFlows is the set of flows between decision and end, for status.
type liveFlows struct {
	mu sync.Mutex
	m  map[uint64]*FlowRecord // guarded by mu; a Flow's fields are written before it is added
}

func (l *liveFlows) add(f *FlowRecord) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[uint64]*FlowRecord{}
	}
	l.m[f.ID] = f
	l.mu.Unlock()
}

// sample is a flow's bytes at the last rate measurement; guarded by liveFlows.mu.
type sample struct {
	at       time.Time
	up, down int64
	upRate   uint64
	downRate uint64
}

// counters are the Router's totals; they survive reloads.
type counters struct {
	flows    atomic.Uint64
	up, down atomic.Uint64 // of ended flows
}

// Status returns the totals, the rule counters of the current policy (the rules in order,
// then one row per implicit step that decided a flow, with Index -1) and the flows running
// now, oldest first.
func (r *Router) Status() Stats {
	p := r.pol.Load()
	now := time.Now()
	live := map[ruleKey]uint64{}
	// Under live.mu the ended flows' bytes and the live ones are one snapshot: a flow ends
	// (finish) under the same lock, so no flow is missed or counted twice, and the byte
	// counters never go back between two calls.
	r.live.mu.Lock()
	defer r.live.mu.Unlock()
	st := Stats{Totals: Totals{Flows: r.count.flows.Load(), Up: r.count.up.Load(), Down: r.count.down.Load()}, Caged: r.caged.list()}
	st.Flows = make([]LiveFlow, 0, len(r.live.m))
	for _, f := range r.live.m {
		up, down := f.bytes.load()
		s := &f.rate
		first := s.at.IsZero()
		if first {
			s.at = f.Start
		}
		if dt := now.Sub(s.at); dt >= rateWindow || first && dt > 0 {
			s.upRate = uint64(float64(up-s.up) / dt.Seconds())
			s.downRate = uint64(float64(down-s.down) / dt.Seconds())
			s.at, s.up, s.down = now, up, down
		}
		st.Flows = append(st.Flows, LiveFlow{
			ID: f.ID, Src: f.Src.String(), Dst: f.dst(), Host: f.Host, NameFrom: f.NameFrom, Inbound: f.Inbound, App: f.App, PID: f.PID,
			Verdict: f.Verdict, Via: f.Via, Age: now.Sub(f.Start),
			Up: uint64(up), Down: uint64(down), UpRate: s.upRate, DownRate: s.downRate,
		})
		st.Totals.Up += uint64(up)
		st.Totals.Down += uint64(down)
		if f.pol == p {
			live[f.key()] += uint64(up + down)
		}
	}
	st.Totals.Live = len(st.Flows)
	slices.SortFunc(st.Flows, func(a, b LiveFlow) int { return int(b.Age - a.Age) })

	rs := p.Decision.Rules()
	st.Rules = make([]RuleHits, 0, len(rs)+1)
	for i := range rs {
		st.Rules = append(st.Rules, RuleHits{Index: i, Rule: rs[i], Hits: p.hits[i].Load(),
			Bytes: p.bytes[i].Load() + live[ruleKey{index: i}]})
	}
	for s := range p.steps {
		for a := range p.steps[s] {
			if n := p.steps[s][a].Load(); n > 0 {
				step, act := policy.Step(s), rules.Action(a)
				st.Rules = append(st.Rules, RuleHits{Index: -1, Rule: rules.Rule{Name: step.String(), Action: act},
					Hits: n, Bytes: p.stepBytes[s][a].Load() + live[ruleKey{-1, step, act}]})
			}
		}
	}
	return st
}

// ruleKey is what decided a flow: a rule's index, or -1, the implicit step and its action.
type ruleKey struct {
	index int
	step  policy.Step
	act   rules.Action
}

func (f *FlowRecord) key() ruleKey {
	if f.index >= 0 {
		return ruleKey{index: f.index}
	}
	return ruleKey{-1, f.Step, f.Verdict.Action}
}

// Refusals returns the router's refusal counts by reason, with the latest of each.
func (r *Router) Refusals() []refusal.Stat { return r.book.Snapshot() }

// count records a decision: under its rule, or under the implicit step that decided.
func (p *compiled) count(d policy.Decision) {
	if d.Index >= 0 {
		p.hits[d.Index].Add(1)
		return
	}
	p.steps[d.Step][d.Action].Add(1)
}

// finish takes f out of the live flows and adds its bytes (f.Up, f.Down, final by now) to
// the totals and to what decided it, in one step under live.mu: Status never sees a flow
// in neither or in both. Every flow's end passes here once, so here it goes to the flow
// log for audits.
func (r *Router) finish(f *FlowRecord) {
	r.live.mu.Lock()
	delete(r.live.m, f.ID)
	r.ended(f)
	r.live.mu.Unlock()
	r.audit(f)
}

// ended adds an ended flow's bytes to the totals and to what decided it; live.mu is held.
func (r *Router) ended(f *FlowRecord) {
	n := uint64(f.Up + f.Down)
	r.count.up.Add(uint64(f.Up))
	r.count.down.Add(uint64(f.Down))
	if f.pol == nil {
		return
	}
	if f.index >= 0 {
		f.pol.bytes[f.index].Add(n)
	} else {
		f.pol.stepBytes[f.Step][f.Verdict.Action].Add(n)
	}
}

// refused counts a refused flow under its reason.
func (r *Router) refused(why refusal.Reason, f *FlowRecord) {
	if !f.refused {
		f.refused, f.why = true, why
	}
	r.book.Add(why, refusal.Event{Src: f.Src, Dst: f.Dst, Host: f.Host, App: f.App, Rule: f.Verdict.Name})
}

// upstreamDown reports whether a proxied connect failed because no proxy could be reached
// (rather than the proxy refusing the destination).
func upstreamDown(err error) bool {
	var ue *upstream.Error
	if !errors.As(err, &ue) {
		return true // no upstream by that name, or no member left to try
	}
	var refused bool
	walk(err, func(e error) {
		if ue, ok := e.(*upstream.Error); ok && ue.Refused {
			refused = true
		}
	})
	return !refused
}

// walk calls fn on err and everything it wraps.
func walk(err error, fn func(error)) {
	if err == nil {
		return
	}
	fn(err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walk(u.Unwrap(), fn)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walk(e, fn)
		}
	}
}
