package router

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

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

// Status returns the rule counters of the current policy and the flows running now, oldest
// first.
func (r *Router) Status() ([]RuleHits, []LiveFlow) {
	p := r.pol.Load()
	rs := p.Rules.Rules()
	hits := make([]RuleHits, 0, len(rs)+1)
	for i := range rs {
		hits = append(hits, RuleHits{Index: i, Rule: rs[i], Hits: p.hits[i+1].Load()})
	}
	hits = append(hits, RuleHits{Index: -1, Rule: rules.Rule{Name: rules.NoMatch, Action: rules.Direct}, Hits: p.hits[0].Load()})
	now := time.Now()
	r.live.mu.Lock()
	flows := make([]LiveFlow, 0, len(r.live.m))
	for _, f := range r.live.m {
		flows = append(flows, LiveFlow{ID: f.ID, Src: f.Src.String(), Dst: f.Dst.String(), Host: f.Host, App: f.App, Verdict: f.Verdict, Age: now.Sub(f.Start)})
	}
	r.live.mu.Unlock()
	slices.SortFunc(flows, func(a, b LiveFlow) int { return int(b.Age - a.Age) })
	return hits, flows
}

// count records a decision.
func (p *policy) count(v rules.Verdict) {
	p.hits[v.Index+1].Add(1)
}

// newHits makes the counters for n rules plus "no rule matched".
func newHits(n int) []atomic.Uint64 { return make([]atomic.Uint64, n+1) }
