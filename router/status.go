package router

import (
	"slices"
	"sync"
	"time"

	"github.com/agentcage/router/policy"
	"github.com/agentcage/router/rules"
)

// RuleHits is a rule and the flows it decided under the current policy.
type RuleHits struct {
	Index int // rule position; -1 for flows no rule matched
	Rule  rules.Rule
	Hits  uint64
}

// liveFlows is the set of flows between decision and end, for status.
type liveFlows struct {
	mu sync.Mutex
	m  map[uint64]*Flow // guarded by mu; a Flow's fields are written before it is added
}

func (l *liveFlows) add(f *Flow) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[uint64]*Flow{}
	}
	l.m[f.ID] = f
	l.mu.Unlock()
}

func (l *liveFlows) remove(id uint64) {
	l.mu.Lock()
	delete(l.m, id)
	l.mu.Unlock()
}

// LiveFlow is a copy of a running flow's decision.
type LiveFlow struct {
	ID      uint64
	Src     string
	Dst     string
	Host    string
	App     string
	Verdict rules.Verdict
	Age     time.Duration
}

// Status returns the rule counters of the current policy (the rules in order, then one row
// per implicit step that decided a flow, with Index -1) and the flows running now, oldest
// first.
func (r *Router) Status() ([]RuleHits, []LiveFlow) {
	p := r.pol.Load()
	rs := p.Decision.Rules()
	hits := make([]RuleHits, 0, len(rs)+1)
	for i := range rs {
		hits = append(hits, RuleHits{Index: i, Rule: rs[i], Hits: p.hits[i].Load()})
	}
	for s := range p.steps {
		if n := p.steps[s].Load(); n > 0 {
			st := policy.Step(s)
			act := rules.Block
			if st == policy.StepNoMatch || st == policy.StepLocal {
				act = rules.Direct
			}
			hits = append(hits, RuleHits{Index: -1, Rule: rules.Rule{Name: st.String(), Action: act}, Hits: n})
		}
	}
	now := time.Now()
	r.live.mu.Lock()
	flows := make([]LiveFlow, 0, len(r.live.m))
	for _, f := range r.live.m {
		flows = append(flows, LiveFlow{ID: f.ID, Src: f.Src.String(), Dst: f.dst(), Host: f.Host, App: f.App, Verdict: f.Verdict, Age: now.Sub(f.Start)})
	}
	r.live.mu.Unlock()
	slices.SortFunc(flows, func(a, b LiveFlow) int { return int(b.Age - a.Age) })
	return hits, flows
}

// count records a decision: under its rule, or under the implicit step that decided.
func (p *compiled) count(d policy.Decision) {
	if d.Index >= 0 {
		p.hits[d.Index].Add(1)
		return
	}
	p.steps[d.Step].Add(1)
}
