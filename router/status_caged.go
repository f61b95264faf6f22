package router

import (
	"slices"
	"sync"
	"time"

	"github.com/agentcage/router/rules/policy"
)

// CagedProcess is a process of this host whose flows the router decided as caged (a caged
// app: a user-space NAT carrying its guests' traffic), for status.
type CagedProcess struct {
	Name    string
	PID     int
	Flows   uint64 // decided since the router started (refused ones included)
	Refused uint64
	Last    time.Time // the last flow decided
}

// maxCagedSeen bounds the processes cagedSeen remembers; the one seen least recently goes.
const maxCagedSeen = 64

// cagedSeen remembers the caged processes whose flows were decided. mu guards m.
type cagedSeen struct {
	mu sync.Mutex
	m  map[cagedKey]*CagedProcess
}

type cagedKey struct {
	name string
	pid  int
}

// note counts flow f decided by d when it is a caged process's (its owner known).
func (c *cagedSeen) note(f *FlowRecord, d policy.Decision) {
	if !d.Caged || f.App == "" {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[cagedKey]*CagedProcess{}
	}
	k := cagedKey{f.App, f.PID}
	p := c.m[k]
	if p == nil {
		if len(c.m) >= maxCagedSeen {
			var oldest cagedKey
			for k, q := range c.m {
				if p == nil || q.Last.Before(p.Last) {
					oldest, p = k, q
				}
			}
			delete(c.m, oldest)
		}
		p = &CagedProcess{Name: f.App, PID: f.PID}
		c.m[k] = p
	}
	p.Flows++
	if !admits(d) {
		p.Refused++
	}
	p.Last = now
}

// list returns the processes seen, the one seen last first.
func (c *cagedSeen) list() []CagedProcess {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]CagedProcess, 0, len(c.m))
	for _, p := range c.m {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b CagedProcess) int { return b.Last.Compare(a.Last) })
	return out
}
