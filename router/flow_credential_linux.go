package router

import "github.com/agentcage/router/rules/policy"

// isBrokered reports whether pf, decided d under p, goes to a brokered destination (the
// event loop hands such a flow to the goroutine path: flow_credential.go).
func (p *compiled) isBrokered(pf *policy.Flow, d policy.Decision) bool {
	_, ok := p.brokered(pf, d)
	return ok
}
