package lint

import (
	"fmt"
	"net/netip"
	"runtime"
	"strings"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
)

// Checks of the cage: what is caged, and whether a rule lets it out.
const (
	CheckDirectCaged  = "direct-caged" // a direct rule takes caged traffic to any destination
	CheckNoWayOut     = "caged-no-way" // caged traffic that no rule sends anywhere
	CheckForeignApp   = "foreign-app"  // an app name that cannot exist on this OS
	CheckPreset       = "preset"       // what a hypervisor preset expanded to (a note)
	CheckUncapturable = "uncapturable" // a preset no capture on this OS can see
)

// goos is the operating system lint judges app names and presets for.
func (l *linter) goos() string {
	if l.host.OS != "" {
		return l.host.OS
	}
	return runtime.GOOS
}

// cage runs the checks of the cage.
func (l *linter) cage() {
	for _, p := range l.cfg.Capture.Presets {
		l.preset(p)
	}
	l.directCaged()
	l.noWayOut()
	l.foreignApps()
}

// preset notes what a preset expanded to, and warns about what it needs.
func (l *linter) preset(p conf.Preset) {
	var parts []string
	if len(p.Apps) > 0 {
		parts = append(parts, "caged apps "+strings.Join(p.Apps, ", "))
	}
	if len(p.Interfaces) > 0 {
		parts = append(parts, "VM interfaces "+strings.Join(p.Interfaces, ", "))
	}
	if len(p.Networks) > 0 {
		ns := make([]string, len(p.Networks))
		for i, n := range p.Networks {
			ns[i] = n.String()
		}
		parts = append(parts, "VM networks "+strings.Join(ns, ", "))
	}
	what := "nothing"
	if len(parts) > 0 {
		what = strings.Join(parts, "; ")
	}
	l.add(Finding{Severity: Note, Check: CheckPreset, Line: l.line("capture.hypervisors"), Rule: p.Name,
		Message: fmt.Sprintf("hypervisor %q on %s (NAT in %s space) adds %s", p.Name, l.goos(), p.NAT, what)})
	switch {
	case p.NAT == conf.NATNone && len(l.cfg.Capture.CageSubnets) > 0:
		// The closed-by-construction mode: an Internal switch the guard keeps from forwarding.
		l.add(Finding{Severity: Note, Check: CheckUncapturable, Line: l.line("capture.cage_subnets"), Rule: p.Name,
			Message: "guests on the cage subnets have no route out but the router's forwards and inbound; the guard forbids forwarding from them"})
	case p.NAT == conf.NATNone:
		l.add(Finding{Severity: Warning, Check: CheckUncapturable, Line: l.line("capture.hypervisors"), Rule: p.Name, Message: p.Note,
			Fix: "put the agent's VM on an Internal switch without NAT and its subnet in [capture] cage_subnets (docs/hyperv.md)"})
	}
}

// directCaged: a direct rule that names caged sources, caged apps or caged = true without
// naming destinations sends caged traffic anywhere, unproxied: the leak itself.
func (l *linter) directCaged() {
	for j := range l.cfg.Rules {
		r := &l.cfg.Rules[j]
		if r.Action != rules.Direct || r.Disabled || len(r.Hosts) > 0 || len(r.Ports) > 0 {
			continue
		}
		var what []string
		if r.Caged {
			what = append(what, "caged = true")
		}
		for _, s := range r.Sources {
			for _, n := range l.cfg.Capture.VMNetworks {
				if rangeOverlaps(s, n) {
					what = append(what, "source "+s.String()+" in the VM network "+n.String())
					break
				}
			}
		}
		for _, a := range r.Apps {
			if c, ok := l.cagedApp(a); ok {
				what = append(what, "app "+a.String()+" (caged: "+c+")")
			}
		}
		if len(what) == 0 {
			continue
		}
		l.add(Finding{Severity: Error, Check: CheckDirectCaged, Line: l.ruleLine(j), Rule: r.Name,
			Message: fmt.Sprintf("%s sends caged traffic (%s) direct to any destination: that is the leak the cage exists to prevent", l.ruleRef(j), strings.Join(what, ", ")),
			Fix:     "name the destinations this traffic may reach directly (hosts, ports), or make the rule proxy or block"})
	}
}

// cagedApp reports whether flows of app a are caged: a matches an app of a proxy or block
// rule or of a preset (the overlap of globs); it returns what cages it.
func (l *linter) cagedApp(a rules.App) (string, bool) {
	if l.caged == nil {
		l.caged = map[rules.App]cagedBy{}
		l.cagers = l.cagerIndex()
	}
	by, ok := l.caged[a]
	if !ok {
		by = l.cagers.first(a, l.every)
		l.caged[a] = by
	}
	if by.entry < 0 {
		return "", false
	}
	e := l.cagers.entries[by.entry]
	if e.rule < 0 {
		return "a hypervisor preset names " + e.app.String(), true
	}
	return l.ruleRef(e.rule) + " names " + e.app.String(), true
}

// cagedBy is what cagedApp found: an index into cagers.entries, -1 for nothing.
type cagedBy struct{ entry int }

// cagers lists the apps that cage, in the order cagedApp looks at them (the presets',
// then each proxy or block rule's), with an index: the first literal of each pattern, the
// first path and the first name pattern (a path pattern and a name pattern may always name
// one executable), and the globs. A literal app overlaps a literal of its own kind only when
// the patterns are the same, so only a glob app needs the whole list.
type cagers struct {
	entries []cager
	literal map[appKey]int
	kind    [2]int // first entry with a name (0) and a path (1) pattern; -1: none
	globs   []int
}

type cager struct {
	rule int // -1: a preset
	app  rules.App
}

type appKey struct {
	path    bool
	pattern string
}

func pathBit(a rules.App) int {
	if a.IsPath() {
		return 1
	}
	return 0
}

func (l *linter) cagerIndex() *cagers {
	cs := &cagers{literal: map[appKey]int{}, kind: [2]int{-1, -1}}
	add := func(rule int, c rules.App) {
		e := len(cs.entries)
		cs.entries = append(cs.entries, cager{rule, c})
		if cs.kind[pathBit(c)] < 0 {
			cs.kind[pathBit(c)] = e
		}
		k := appKey{c.IsPath(), c.Pattern()}
		if !c.IsLiteral() {
			cs.globs = append(cs.globs, e)
		} else if _, seen := cs.literal[k]; !seen {
			cs.literal[k] = e
		}
	}
	for _, c := range l.cfg.Capture.CagedApps {
		add(-1, c)
	}
	for i := range l.cfg.Rules {
		r := &l.cfg.Rules[i]
		if !r.Cages() {
			continue
		}
		for _, c := range r.Apps {
			add(i, c)
		}
	}
	return cs
}

// first returns the first entry whose app overlaps a; every looks at each entry in turn
// instead of asking the index.
func (cs *cagers) first(a rules.App, every bool) cagedBy {
	if every || !a.IsLiteral() {
		for e, c := range cs.entries {
			if appOverlaps(a, c.app) {
				return cagedBy{e}
			}
		}
		return cagedBy{-1}
	}
	best := cs.kind[1-pathBit(a)]
	if e, ok := cs.literal[appKey{a.IsPath(), a.Pattern()}]; ok && (best < 0 || e < best) {
		best = e
	}
	for _, e := range cs.globs {
		if best >= 0 && e > best {
			break
		}
		if appOverlaps(a, cs.entries[e].app) {
			best = e
			break
		}
	}
	return cagedBy{best}
}

// noWayOut warns about a VM network or a preset's apps whose every flow to anything but
// this host is refused: no proxy or direct rule that may take caged traffic applies to it.
// That may be meant (a guest with only the model), so it is a warning.
func (l *linter) noWayOut() {
	out := func(r *rules.Rule) bool {
		if r.Disabled || r.Action == rules.Block || r.HostOnly() {
			return false
		}
		if len(r.Hosts) == 0 {
			return true
		}
		for _, h := range r.Hosts {
			if !l.local.overlaps(hostSetOf([]rules.Host{h})) {
				return true
			}
		}
		return false
	}
	for i, n := range l.cfg.Capture.VMNetworks {
		found := false
		for j := range l.cfg.Rules {
			r := &l.cfg.Rules[j]
			if !out(r) || len(r.Apps) > 0 || len(r.Services) > 0 {
				continue
			}
			if len(r.Sources) == 0 || anyRangeOverlaps(r.Sources, n) {
				found = true
				break
			}
		}
		if !found {
			l.add(Finding{Severity: Warning, Check: CheckNoWayOut, Line: l.line(fmt.Sprintf("capture.vm_networks[%d]", i+1)), Rule: n.String(),
				Message: fmt.Sprintf("the VM network %s has no way out: no rule sends its traffic through a proxy (or to a named destination), so every flow but the forwards is refused; a direct rule without destinations applies to this host's own traffic only", n),
				Fix:     fmt.Sprintf("add a rule with sources = [%q] (or caged = true) and action = \"proxy\"", n)})
		}
	}
	// A VM interface is caged whole: a guest address outside vm_networks needs a rule that
	// takes any source (caged = true, or no sources and no apps).
	if len(l.cfg.Capture.VMInterfaces) > 0 {
		found := false
		for j := range l.cfg.Rules {
			r := &l.cfg.Rules[j]
			if out(r) && len(r.Sources) == 0 && len(r.Apps) == 0 && len(r.Services) == 0 {
				found = true
				break
			}
		}
		if !found {
			l.add(Finding{Severity: Warning, Check: CheckNoWayOut, Line: l.line("capture.vm_interfaces"), Rule: strings.Join(l.cfg.Capture.VMInterfaces, ","),
				Message: fmt.Sprintf("guests on the VM interfaces %s with addresses outside vm_networks (a second subnet, IPv6) have no way out: no rule that takes any source sends them through a proxy", strings.Join(l.cfg.Capture.VMInterfaces, ", ")),
				Fix:     "add a rule with caged = true and action = \"proxy\""})
		}
	}
	for _, a := range l.cfg.Capture.CagedApps {
		found := false
		for j := range l.cfg.Rules {
			r := &l.cfg.Rules[j]
			if !out(r) || len(r.Sources) > 0 {
				continue
			}
			if len(r.Apps) == 0 && len(r.Services) == 0 || appsOverlap(r.Apps, []rules.App{a}) {
				found = true
				break
			}
		}
		if !found {
			l.add(Finding{Severity: Warning, Check: CheckNoWayOut, Line: l.line("capture.hypervisors"), Rule: a.String(),
				Message: fmt.Sprintf("the caged app %s (a hypervisor preset) has no way out: no rule sends its traffic through a proxy, so every flow of it is refused", a),
				Fix:     "add a rule with caged = true (or apps naming it) and action = \"proxy\""})
		}
	}
}

// foreignApps warns about app names no process of this OS carries: an .exe on Linux, a
// literal name without an extension on Windows.
func (l *linter) foreignApps() {
	for j := range l.cfg.Rules {
		r := &l.cfg.Rules[j]
		for _, a := range r.Apps {
			base := a.String()
			if i := strings.LastIndexAny(base, `/\`); i >= 0 {
				base = base[i+1:]
			}
			var why string
			switch {
			case l.goos() != "windows" && strings.HasSuffix(strings.ToLower(base), ".exe"):
				why = "a Windows image name; on " + l.goos() + " processes have no .exe"
			case l.goos() == "windows" && a.IsLiteral() && !strings.Contains(base, "."):
				why = "on Windows an image name ends with its extension (.exe)"
			}
			if why != "" {
				l.add(Finding{Severity: Warning, Check: CheckForeignApp, Line: l.ruleLine(j), Rule: r.Name,
					Message: fmt.Sprintf("%s names the app %q: %s, so it never matches here", l.ruleRef(j), a.String(), why),
					Fix:     "use the hypervisors preset for this OS, or the process name `ps -e` shows"})
			}
		}
	}
}

func rangeOverlaps(r rules.IPRange, n netip.Prefix) bool {
	nr := rules.RangeOfPrefix(n)
	return r.Lo.BitLen() == nr.Lo.BitLen() && !(r.Hi.Less(nr.Lo) || nr.Hi.Less(r.Lo))
}

func anyRangeOverlaps(rs []rules.IPRange, n netip.Prefix) bool {
	for _, r := range rs {
		if rangeOverlaps(r, n) {
			return true
		}
	}
	return false
}
