package policy

import "github.com/agentcage/router/conf"

// Profiles: a config's [profile.NAME] tables are rule lists that replace the top-level
// [[rule]] list for the guests switched to them at run time. New compiles one Policy per
// profile from the same config with the profile's rules in place of the top-level ones;
// the rest of the config (VM networks, caged apps, DNS, forwards and their gates, the
// walls) is the default policy's. The caged set in particular is the default's whatever a
// profile's rules name: a profile changes what a guest may reach, never who is caged.
// Approved rules ([policy] approved) belong to the default profile only.
//
// A profile's Policy has no profiles of its own. Its rule indexes are positions in its own
// rule list (Rules).

// DefaultProfile names the top-level [[rule]] list as a profile (conf.DefaultProfile).
const DefaultProfile = conf.DefaultProfile

// compileProfiles compiles cfg's profiles into p.profiles; New calls it last.
func (p *Policy) compileProfiles(cfg *conf.Config, env Env) {
	if len(cfg.Profiles) == 0 {
		return
	}
	p.profiles = make(map[string]*Policy, len(cfg.Profiles))
	p.profileNames = []string{conf.DefaultProfile}
	for _, pr := range cfg.Profiles {
		c := *cfg
		c.Rules, c.RuleLines, c.Profiles = pr.Rules, pr.RuleLines, nil
		c.ApprovedAt, c.ApprovedN = 0, 0
		sub := New(&c, env)
		sub.cagedApps, sub.hasCaged = p.cagedApps, p.hasCaged
		sub.needOwner = sub.needOwner || p.needOwner
		sub.name = pr.Name
		p.needOwner = p.needOwner || sub.needOwner
		p.profiles[pr.Name] = sub
		p.profileNames = append(p.profileNames, pr.Name)
	}
	// The owner of a flow is looked up before its guest's profile is known: every
	// profile's Policy asks for it when one of them needs it.
	for _, sub := range p.profiles {
		sub.needOwner = p.needOwner
	}
}

// Profile returns the Policy of the profile named name: p itself for conf.DefaultProfile
// (and ""), false for a name the config does not define.
func (p *Policy) Profile(name string) (*Policy, bool) {
	if name == "" || name == conf.DefaultProfile {
		return p, true
	}
	sub, ok := p.profiles[name]
	return sub, ok
}

// ProfileName is the name of the profile p was compiled for: conf.DefaultProfile for a
// config's top-level rules.
func (p *Policy) ProfileName() string {
	if p.name == "" {
		return conf.DefaultProfile
	}
	return p.name
}

// ProfileNames lists the profiles a guest may be switched to, conf.DefaultProfile first,
// then the config's [profile.NAME] tables in name order.
func (p *Policy) ProfileNames() []string {
	if len(p.profileNames) == 0 {
		return []string{conf.DefaultProfile}
	}
	return p.profileNames
}
