package conf

import (
	"slices"
	"strconv"

	"github.com/agentcage/router/rules"
)

// DefaultProfile is the name of the top-level [[rule]] list as a profile: the rules every
// guest is decided by until it is switched to a [profile.NAME] (and after it is switched
// back).
const DefaultProfile = "default"

// Profile is one [profile.NAME] table: a named list of rules that replaces the top-level
// [[rule]] list for the guests switched to it at run time (router profile GUEST NAME).
// Everything else of the config (proxies, capture, DNS, forwards, budgets) is shared.
type Profile struct {
	Name  string
	Rules []rules.Rule
	// RuleLines[i] is the line of the [[profile.NAME.rule]] header of Rules[i].
	RuleLines []int
}

// Profile returns the profile named name; DefaultProfile is the top-level rules.
func (c *Config) Profile(name string) (*Profile, bool) {
	if name == DefaultProfile {
		return &Profile{Name: DefaultProfile, Rules: c.Rules, RuleLines: c.RuleLines}, true
	}
	i := slices.IndexFunc(c.Profiles, func(p Profile) bool { return p.Name == name })
	if i < 0 {
		return nil, false
	}
	return &c.Profiles[i], true
}

// ProfileNames lists the profiles a guest may be switched to: DefaultProfile first, then
// the [profile.NAME] tables in name order.
func (c *Config) ProfileNames() []string {
	names := []string{DefaultProfile}
	for _, p := range c.Profiles {
		names = append(names, p.Name)
	}
	return names
}

// profiles decodes the [profile.NAME] tables: each holds only [[profile.NAME.rule]] entries,
// decoded and checked as the top-level rules are. A profile's rules are its own: rule names
// may repeat those of another profile.
func (d *decoder) profiles(c *Config, v any) {
	top, ok := d.table(at{path: "profile"}, v)
	if !ok {
		return
	}
	names := make([]string, 0, len(top))
	for n := range top {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		a := at{path: "profile." + n}
		switch {
		case n == DefaultProfile:
			d.fail(a, "%q is the name of the top-level [[rule]] list; give the profile another name", n)
			continue
		case !validName(n):
			d.fail(a, "profile name %q: use letters, digits, '-' and '_'", n)
			continue
		}
		m, ok := d.table(a, top[n])
		if !ok {
			continue
		}
		d.checkKeys(a, m, []string{"rule"})
		p := Profile{Name: n}
		if rv, ok := m["rule"]; ok {
			p.Rules, p.RuleLines = d.ruleList(c, rv, a.path+".rule", "profile "+n+" ")
		}
		d.profileUDP(c, &p)
		c.Profiles = append(c.Profiles, p)
	}
	if d.opts.goos() == "windows" {
		return
	}
	for i := range c.Profiles {
		aliasApps(c.Profiles[i].Rules)
	}
}

// profileUDP is checkUDP for p's rules: a rule that takes UDP through a proxy that cannot
// carry it cannot work.
func (d *decoder) profileUDP(c *Config, p *Profile) {
	for i, r := range p.Rules {
		if r.Network != rules.UDP || r.Action != rules.Proxy {
			continue
		}
		for _, n := range ProxyNames(r.Proxy) {
			if k, ok := d.proxies[n]; ok && !c.Proxies[k].CarriesUDP() {
				a := at{path: "profile." + p.Name + ".rule[" + strconv.Itoa(i+1) + "].proxy",
					where: "profile " + p.Name + " rule #" + strconv.Itoa(i+1) + " " + strconv.Quote(r.Name) + ", proxy"}
				d.fail(a, "the rule takes UDP (network = \"udp\") but [proxy.%s] %s: use a socks5 proxy reached directly for it", n, c.Proxies[k].noUDP())
			}
		}
	}
}
