package router

import "github.com/agentcage/router/rules/policy"

// gated reports whether pf, decided d under p, is served by a model gate (the event loop
// hands such a flow to the goroutine path).
func (p *compiled) gated(pf *policy.Flow, d policy.Decision) bool {
	_, ok := p.gate(pf, d)
	return ok
}
