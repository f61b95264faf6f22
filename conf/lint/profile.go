package lint

// profiles lints each [profile.NAME]'s rules as a rule list of its own (unreachable and
// shadowed rules, local destinations through a proxy, DoH resolvers), each finding's message
// headed with the profile. A profile decides only VM guests' flows, which a rule list
// without a catch-all refuses rather than sends direct: the catch-all warning is left out.
func (l *linter) profiles() {
	for _, p := range l.cfg.Profiles {
		c := *l.cfg
		c.Rules, c.RuleLines, c.Profiles = p.Rules, p.RuleLines, nil
		c.ApprovedAt, c.ApprovedN = 0, 0
		pl := &linter{cfg: &c, host: l.host, local: l.local, every: l.every}
		pl.rules()
		for _, f := range pl.out {
			if f.Check == CheckNoCatchAll {
				continue
			}
			f.Message = "profile " + p.Name + ": " + f.Message
			l.add(f)
		}
	}
}
