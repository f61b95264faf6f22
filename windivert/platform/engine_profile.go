package platform

import (
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/rules/policy"
)

var _ capture.ProfileDecider = (*redirectPlatform)(nil)

// UseProfiles: the engine decides a switched guest's flows by its profile (pick), at their
// first packet as every flow (redirect.Options.Profile).
func (p *redirectPlatform) UseProfiles(pick func(p *policy.Policy, f *policy.Flow) *policy.Policy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.profile = pick
}

// EndSwitched: the engine's passed flows of the switched guest that its profile refuses
// (redirect.Engine.EndRefused); none before the engine runs.
func (p *redirectPlatform) EndSwitched(of func(p *policy.Policy, f *policy.Flow) bool) int {
	p.mu.Lock()
	eng := p.eng
	p.mu.Unlock()
	if eng == nil {
		return 0
	}
	return eng.EndRefused(of)
}
