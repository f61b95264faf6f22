// Package lint finds the mistakes a rule list can hide: rules that can never match, local
// destinations that would go through a remote proxy (the svchost/portproxy trap), a forward
// listening on every address, a proxy nobody uses. It only reads a validated config; the
// caller supplies what it knows of the host (its addresses and name).
package lint

import (
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// Severity of a finding: errors make `router lint` exit non-zero.
type Severity string

const (
	Error   Severity = "error"
	Warning Severity = "warning"
	// Note says what the config expands to (presets); it never changes the exit status.
	Note Severity = "note"
)

// Checks, as named in findings.
const (
	CheckUnreachable   = "unreachable"      // earlier rules take all of a rule's traffic
	CheckLocalViaProxy = "local-via-proxy"  // local destinations would go to a remote proxy
	CheckShadowed      = "partly-shadowed"  // an earlier rule with another verdict takes part
	CheckForwardAny    = "forward-any"      // a forward listens on 0.0.0.0 or ::
	CheckForwardRaw    = "forward-raw"      // a forward is a raw TCP pipe (api = "tcp")
	CheckInboundAny    = "inbound-any"      // an inbound listens on 0.0.0.0 or ::
	CheckMetricsOpen   = "metrics-open"     // the metrics endpoint listens off loopback
	CheckUnusedProxy   = "unused-proxy"     // a [proxy.X] nothing refers to
	CheckNoCatchAll    = "no-catch-all"     // flows no rule matches go direct implicitly
	CheckNothingCaught = "nothing-captured" // no vm_networks and local = false
	CheckUncagedSwitch = "uncaged-adapter"  // Windows NAT or forwarding carries an adapter's guests
	CheckHostResolver  = "host-resolver"    // a VM resolves through the host's Dnscache, which "caged" passes
	CheckDisabled      = "disabled"         // a rule with enabled = false: kept, never matched
	CheckBridged       = "bridged-vm"       // a VM bridged to a host adapter: no capture sees it
	CheckDoH           = "doh-endpoint"     // a rule lets through a DoH resolver that caged flows never reach
)

// Finding is one problem.
type Finding struct {
	Severity Severity `json:"severity"`
	Check    string   `json:"check"`
	Line     int      `json:"line,omitempty"`
	Rule     string   `json:"rule,omitempty"`  // the rule the finding is about
	Other    string   `json:"other,omitempty"` // the earlier rule that causes it
	Message  string   `json:"message"`
	Fix      string   `json:"fix,omitempty"`
}

// Host is what lint knows of the machine: its own addresses, the networks they are on, and
// its name. The zero Host still knows loopback, link-local and the NAT host alias.
type Host struct {
	Addrs    []netip.Addr
	Prefixes []netip.Prefix
	Name     string
	// OS is the operating system app names and presets are judged for; empty means the one
	// lint runs on.
	OS string
	// Windows is what the caller could learn of this Windows machine's VMs (windows.go);
	// the zero value knows nothing, and the checks that need it say nothing.
	Windows WindowsFacts
}

// natHostAlias is the host as a VirtualBox or QEMU NAT guest sees it.
var natHostAlias = netip.MustParseAddr("10.0.2.2")

// Check lints a config. Findings come in rule order, errors and warnings mixed.
//
// Its cost grows with the number of rules times a log, plus the pairs of rules that overlap
// (each of which may be a finding): an index finds the earlier rules a rule can meet, and the
// subtraction that decides reachability stops after maxPieces pieces or maxWork steps for a
// rule, taking it as reachable.
func Check(cfg *conf.Config, h Host) []Finding {
	return check(cfg, h, false)
}

// check is Check; every compares each rule with every earlier one instead of asking the
// index (the slow, plain way the test holds the index to).
func check(cfg *conf.Config, h Host, every bool) []Finding {
	l := &linter{cfg: cfg, host: h, every: every}
	l.local = l.localSet()
	l.rules()
	l.forwards()
	l.ungated()
	l.inbounds()
	l.metrics()
	l.proxies()
	l.capture()
	l.cage()
	l.windows()
	return l.out
}

// HasErrors reports whether any finding is an error.
func HasErrors(fs []Finding) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Severity == Error })
}

type linter struct {
	cfg   *conf.Config
	host  Host
	local *hostSet // destinations that are this host or its links
	out   []Finding
	every bool // no index: compare each rule with every earlier one
	// caged memoizes cagedApp by app; cagers is its index (both made on first use).
	caged  map[rules.App]cagedBy
	cagers *cagers
}

func (l *linter) add(f Finding) { l.out = append(l.out, f) }

func (l *linter) ruleLine(i int) int {
	if i >= l.cfg.ApprovedAt && i < l.cfg.ApprovedAt+l.cfg.ApprovedN {
		return 0 // a line of the approved rules file, not of the config
	}
	if i >= 0 && i < len(l.cfg.RuleLines) {
		return l.cfg.RuleLines[i]
	}
	return 0
}

// line is the line of a key path, 0 when the file does not write it.
func (l *linter) line(path string) int { return l.cfg.Line(path) }

func (l *linter) ruleRef(i int) string {
	return "rule #" + strconv.Itoa(i+1) + " " + strconv.Quote(l.cfg.Rules[i].Name)
}

func verdict(r *rules.Rule) string {
	if r.Action == rules.Proxy {
		return "proxy via " + r.Proxy
	}
	return r.Action.String()
}

// localSet is every destination lint calls local: the policy's local prefixes (loopback,
// link-local, multicast, broadcast, unspecified), the NAT host alias, the host's addresses
// and the networks it is on, the forwards' and inbounds' listen addresses, and the names localhost,
// *.localhost and the host's own name.
func (l *linter) localSet() *hostSet {
	s := &hostSet{addrs: &ivset{}, names: []string{"localhost"}, suffixes: []string{"localhost"}}
	for _, p := range policy.LocalPrefixes() {
		r := rules.RangeOfPrefix(p)
		s.addrs.add(iv{netaddr.KeyOf(r.Lo), netaddr.KeyOf(r.Hi)})
	}
	addr := func(a netip.Addr) {
		a = a.Unmap()
		s.addrs.add(iv{netaddr.KeyOf(a), netaddr.KeyOf(a)})
	}
	addr(natHostAlias)
	for _, a := range l.host.Addrs {
		addr(a)
	}
	for _, p := range l.host.Prefixes {
		r := rules.RangeOfPrefix(p.Masked())
		s.addrs.add(iv{netaddr.KeyOf(r.Lo), netaddr.KeyOf(r.Hi)})
	}
	for _, f := range l.cfg.Forwards {
		if !f.Listen.Addr().IsUnspecified() {
			addr(f.Listen.Addr())
		}
	}
	for _, in := range l.cfg.Inbounds {
		if !in.Listen.Addr().IsUnspecified() {
			addr(in.Listen.Addr())
		}
	}
	if n := strings.ToLower(l.host.Name); n != "" {
		s.names = append(s.names, n)
	}
	return s
}

// localHosts returns the entries of hs that name local destinations.
func (l *linter) localHosts(hs []rules.Host) []rules.Host {
	var out []rules.Host
	for _, h := range hs {
		if l.local.overlaps(hostSetOf([]rules.Host{h})) {
			out = append(out, h)
		}
	}
	return out
}

func hostList(hs []rules.Host) string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.String()
	}
	return strings.Join(s, ", ")
}

func (l *linter) rules() {
	rs := l.cfg.Rules
	boxes := make([]box, len(rs))
	for i := range rs {
		boxes[i] = boxOf(&rs[i])
	}
	idx := newBoxIndex(boxes)
	var dec *policy.Policy // for the DoH check, made on first use
	for j := range rs {
		r := &rs[j]
		if !r.Disabled && r.Action != rules.Block && !l.cfg.DNS.AllowDoH {
			if dec == nil {
				dec = policy.New(l.cfg, policy.Env{})
			}
			l.dohHosts(j, dec)
		}
		if r.Disabled {
			l.add(Finding{Severity: Note, Check: CheckDisabled, Line: l.ruleLine(j), Rule: r.Name,
				Message: fmt.Sprintf("%s is disabled (enabled = false): it matches no flow, and lint checks it against no other rule", l.ruleRef(j)),
				Fix:     "delete the line enabled = false (or set it to true) to use the rule again"})
			continue
		}
		// A proxy rule that names local destinations.
		if r.Action == rules.Proxy {
			if loc := l.localHosts(r.Hosts); len(loc) > 0 {
				l.add(Finding{Severity: Error, Check: CheckLocalViaProxy, Line: l.ruleLine(j), Rule: r.Name,
					Message: fmt.Sprintf("%s sends local destinations (%s) to the remote proxy %q; the proxy cannot reach this host, so the connection hangs (or, for this host's own addresses, is refused: caged traffic reaches the host only at the forwards' and inbounds' addresses and ports)", l.ruleRef(j), hostList(loc), r.Proxy),
					Fix:     "remove the local destinations from this rule and give them a direct rule above it"})
			}
		}
		// The rules above j that may overlap it, in order: those of the groups keep
		// passes, found by the index, or all of them.
		earlier := func(keep func(int) bool) iter.Seq[int] {
			all := func(yield func(int) bool) {
				for i := 0; i < j && yield(i); i++ {
				}
			}
			if !l.every {
				all = idx.earlier(j, keep)
			}
			// A disabled rule takes nothing from the rules below it.
			return func(yield func(int) bool) {
				for i := range all {
					if !rs[i].Disabled && !yield(i) {
						return
					}
				}
			}
		}
		if l.unreachable(j, boxes, earlier(subtractors(&boxes[j]))) {
			continue
		}
		l.localShadowed(j, boxes, earlier(anyGroup))
		l.partlyShadowed(j, boxes, earlier(destCovers(&boxes[j])))
	}
	n := len(rs)
	for n > 0 && rs[n-1].Disabled {
		n-- // the last rule that decides anything
	}
	switch {
	case n == 0:
		l.add(Finding{Severity: Warning, Check: CheckNoCatchAll,
			Message: "there are no rules: every captured flow goes direct",
			Fix:     "add rules; end the list with a catch-all (only name and action)"})
	case !isCatchAll(&rs[n-1]):
		l.add(Finding{Severity: Warning, Check: CheckNoCatchAll, Line: l.ruleLine(n - 1),
			Message: "the last rule is not a catch-all: flows that no rule matches go direct",
			Fix:     "end the list with a rule that has only name and action, so the default is written down"})
	}
}

// dohHosts warns when rule j names a DNS-over-HTTPS resolver the policy refuses to caged
// flows (policy.Policy.DoH): for caged traffic that part of the rule never applies.
func (l *linter) dohHosts(j int, dec *policy.Policy) {
	var hit []rules.Host
	for _, h := range l.cfg.Rules[j].Hosts {
		switch {
		case h.Kind == rules.HostName && dec.DoH(h.Name, netip.Addr{}),
			h.Kind == rules.HostRange && h.Range.Lo == h.Range.Hi && dec.DoH("", h.Range.Lo):
			hit = append(hit, h)
		}
	}
	if len(hit) == 0 {
		return
	}
	l.add(Finding{Severity: Warning, Check: CheckDoH, Line: l.ruleLine(j), Rule: l.cfg.Rules[j].Name,
		Message: fmt.Sprintf("%s names DNS-over-HTTPS resolvers (%s): caged traffic to them is refused whatever the rules say (reason doh), so for caged flows that part of the rule never applies", l.ruleRef(j), hostList(hit)),
		Fix:     "remove them, or set [dns] allow_doh = true to let caged traffic reach DoH resolvers"})
}

func isCatchAll(r *rules.Rule) bool { return r.Network == rules.AnyNetwork && r.Bare() }

// maxPieces and maxWork bound the work of the subtraction for one rule (the pieces it may
// leave, the subtractions of a piece it may make); past either, the rule is taken as
// reachable.
const (
	maxPieces = 4096
	maxWork   = 1024
)

// unreachable reports (and records) whether the earlier rules cover all of rule j; earlier
// yields, in order, every rule above j that may take something from it (and maybe others).
func (l *linter) unreachable(j int, boxes []box, earlier iter.Seq[int]) bool {
	left := []box{boxes[j]}
	var spare []box // the other buffer: pieces go from one to the other
	var by []int
	work := 0
	for i := range earlier {
		if len(left) == 0 {
			break
		}
		if !canSubtract(boxes[i], boxes[j]) {
			continue
		}
		if work += len(left); work > maxWork {
			return false
		}
		next := spare[:0]
		hit := false
		for _, b := range left {
			if !b.overlaps(boxes[i]) {
				next = append(next, b) // what minus would return
				continue
			}
			pieces := b.minus(boxes[i])
			if len(pieces) != 1 || !sameBox(pieces[0], b) {
				hit = true
			}
			next = append(next, pieces...)
		}
		if hit {
			by = append(by, i)
		}
		left, spare = next, left
		if len(left) > maxPieces {
			return false
		}
	}
	if len(left) > 0 {
		return false
	}
	r := &l.cfg.Rules[j]
	refs := make([]string, len(by))
	for k, i := range by {
		refs[k] = l.ruleRef(i) + " (line " + strconv.Itoa(l.ruleLine(i)) + ")"
	}
	msg := fmt.Sprintf("%s can never match: %s already take%s all of its traffic", l.ruleRef(j), strings.Join(refs, " and "), map[bool]string{true: "s", false: ""}[len(by) == 1])
	fix := fmt.Sprintf("move %q above %s, or delete it", r.Name, l.cfg.Rules[by[0]].Name)
	f := Finding{Severity: Error, Check: CheckUnreachable, Line: l.ruleLine(j), Rule: r.Name, Other: l.cfg.Rules[by[0]].Name, Message: msg, Fix: fix}
	if loc := l.localHosts(r.Hosts); len(loc) > 0 && r.Action == rules.Direct {
		for _, i := range by {
			if l.cfg.Rules[i].Action == rules.Proxy {
				f.Message += fmt.Sprintf("; its local destinations (%s) would go through the remote proxy %q and hang", hostList(loc), l.cfg.Rules[i].Proxy)
				break
			}
		}
	}
	l.add(f)
	return true
}

// sameBox reports whether a is b unchanged: the same sets (the subtraction makes new ones
// for what it changes), networks, apps, services and caged side.
func sameBox(a, b box) bool {
	return a.src == b.src && a.hosts == b.hosts && a.ports == b.ports && a.cage == b.cage &&
		slices.Equal(a.net, b.net) && slices.Equal(a.apps, b.apps) && slices.Equal(a.svcs, b.svcs)
}

// localShadowed reports the trap: a direct rule for local destinations below a proxy rule
// that also takes some of that traffic; earlier yields the rules above j that may overlap it.
func (l *linter) localShadowed(j int, boxes []box, earlier iter.Seq[int]) {
	r := &l.cfg.Rules[j]
	if r.Action != rules.Direct {
		return
	}
	loc := l.localHosts(r.Hosts)
	if len(loc) == 0 {
		return
	}
	lb := boxes[j]
	lb.hosts = hostSetOf(loc)
	for i := range earlier {
		e := &l.cfg.Rules[i]
		if e.Action != rules.Proxy || !boxes[i].overlaps(lb) {
			continue
		}
		l.add(Finding{Severity: Error, Check: CheckLocalViaProxy, Line: l.ruleLine(j), Rule: r.Name, Other: e.Name,
			Message: fmt.Sprintf("%s is shadowed for local destinations: %s (line %d, %s) comes first and also takes %s; that traffic would go to the remote proxy and hang (or, for this host's own addresses, be refused)",
				l.ruleRef(j), l.ruleRef(i), l.ruleLine(i), verdict(e), describe(e, loc, r)),
			Fix: fmt.Sprintf("move %q above %q", r.Name, e.Name)})
		return
	}
}

// describe says in words which flows of the later rule the earlier rule takes.
func describe(e *rules.Rule, loc []rules.Host, r *rules.Rule) string {
	var b strings.Builder
	switch {
	case len(e.Apps) > 0:
		b.WriteString(appList(e.Apps))
	case len(r.Apps) > 0:
		b.WriteString(appList(r.Apps))
	default:
		b.WriteString("any process")
	}
	b.WriteString(" → " + hostList(loc))
	ports := r.Ports
	if len(ports) == 0 {
		ports = e.Ports
	}
	if len(ports) > 0 {
		ps := make([]string, len(ports))
		for i, p := range ports {
			ps[i] = p.String()
		}
		b.WriteString(" port " + strings.Join(ps, ", "))
	}
	return b.String()
}

func appList(as []rules.App) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// partlyShadowed warns when an earlier rule with another verdict takes part of a rule's
// traffic to every one of its destinations: the earlier rule is as wide as the later one on
// network, hosts and ports and narrows only by origin (apps, services, sources). An earlier
// rule that is narrower on destinations is the usual exception-first order (the model port
// above the hypervisor rule) and is left alone, as are catch-alls, which everything above
// them shadows in part. earlier yields the rules above j that may be as wide, in order.
func (l *linter) partlyShadowed(j int, boxes []box, earlier iter.Seq[int]) {
	r := &l.cfg.Rules[j]
	if isCatchAll(r) {
		return
	}
	local := r.Action == rules.Direct && len(l.localHosts(r.Hosts)) > 0
	for i := range earlier {
		e := &l.cfg.Rules[i]
		if verdict(e) == verdict(r) || !boxes[i].overlaps(boxes[j]) || !boxes[i].destContains(boxes[j]) {
			continue
		}
		if local && e.Action == rules.Proxy {
			continue // reported as local-via-proxy
		}
		l.add(Finding{Severity: Warning, Check: CheckShadowed, Line: l.ruleLine(j), Rule: r.Name, Other: e.Name,
			Message: fmt.Sprintf("%s (%s) is partly shadowed: %s (line %d, %s) comes first and takes its flows from %s",
				l.ruleRef(j), verdict(r), l.ruleRef(i), l.ruleLine(i), verdict(e), origin(e)),
			Fix: fmt.Sprintf("if %q should win for those flows, move it above %q", r.Name, e.Name)})
	}
}

// origin says in words which sources a rule narrows to.
func origin(e *rules.Rule) string {
	var parts []string
	if len(e.Apps) > 0 {
		parts = append(parts, appList(e.Apps))
	}
	if len(e.Services) > 0 {
		parts = append(parts, "services "+strings.Join(e.Services, ", "))
	}
	if len(e.Sources) > 0 {
		s := make([]string, len(e.Sources))
		for i, r := range e.Sources {
			s[i] = r.String()
		}
		parts = append(parts, "sources "+strings.Join(s, ", "))
	}
	if len(parts) == 0 {
		return "everywhere"
	}
	return strings.Join(parts, "; ")
}

func (l *linter) forwards() {
	for i, f := range l.cfg.Forwards {
		name := "forward #" + strconv.Itoa(i+1)
		if f.Name != "" {
			name += " " + strconv.Quote(f.Name)
		}
		if f.Raw() {
			l.add(Finding{Severity: Warning, Check: CheckForwardRaw, Line: f.Line, Rule: f.Name,
				Message: fmt.Sprintf("%s is a raw TCP pipe (api = \"tcp\"): the guest reaches every call of %s, management included (a model server's pull, push or create makes this host fetch or upload wherever the guest says, past the proxy)", name, f.Connect),
				Fix:     "name the server's API instead (api = \"ollama\", \"openai\" or \"lmstudio\"), adding what else it needs with allow_paths"})
		}
		if f.Listen.Addr().IsUnspecified() {
			l.add(Finding{Severity: Error, Check: CheckForwardAny, Line: f.Line, Rule: f.Name,
				Message: fmt.Sprintf("%s listens on %s: anyone on any network this host joins (a shared Wi-Fi) can reach %s", name, f.Listen, f.Connect),
				Fix:     "listen on the VM-facing address only (e.g. the host-only adapter's 192.168.56.1)"})
		}
	}
}

// metrics reports a metrics endpoint off loopback (conf takes it only with unsafe_listen).
func (l *linter) metrics() {
	m := l.cfg.Metrics.Listen
	if !m.IsValid() || m.Addr().IsLoopback() {
		return
	}
	l.add(Finding{Severity: Warning, Check: CheckMetricsOpen, Line: l.line("metrics.listen"),
		Message: fmt.Sprintf("the metrics endpoint listens on %s: whoever reaches that address reads the rules, refusals and upstreams the router counts", m),
		Fix:     "listen on 127.0.0.1 and scrape from this host, or restrict who reaches the address"})
}

func (l *linter) proxies() {
	used := map[string]bool{l.cfg.DNS.Proxy: true}
	for _, r := range l.cfg.Rules {
		if r.Action == rules.Proxy {
			for _, n := range conf.ProxyNames(r.Proxy) {
				used[n] = true
			}
		}
	}
	// A proxy that a used one is reached through (via) is used too, hop by hop; conf bounds
	// the chains and refuses cycles.
	for _, p := range l.cfg.Proxies {
		for q := &p; used[q.Name] && q.Via != "" && !used[q.Via]; {
			used[q.Via] = true
			next, ok := l.cfg.Proxy(q.Via)
			if !ok {
				break
			}
			q = next
		}
	}
	for _, p := range l.cfg.Proxies {
		if !used[p.Name] {
			l.add(Finding{Severity: Error, Check: CheckUnusedProxy, Line: p.Line, Rule: p.Name,
				Message: fmt.Sprintf("[proxy.%s] is defined but no rule uses it", p.Name),
				Fix:     fmt.Sprintf("add proxy = %q to the rule meant for it, or delete the table", p.Name)})
		}
	}
}

func (l *linter) capture() {
	c := &l.cfg.Capture
	// The caged processes (the presets' images, the apps of proxy and block rules) are
	// captured whatever local says, on every OS: Linux marks their sockets in the kernel,
	// Windows captures by process. On Windows every rule's apps and services are taken.
	apps := len(c.CagedApps) > 0 || slices.ContainsFunc(l.cfg.Rules, func(r rules.Rule) bool {
		return r.Cages() && len(r.Apps) > 0 || l.goos() == "windows" && (len(r.Apps) > 0 || len(r.Services) > 0)
	})
	if len(c.VMNetworks) == 0 && len(c.VMInterfaces) == 0 && !c.Local && !apps {
		l.add(Finding{Severity: Warning, Check: CheckNothingCaught,
			Message: "[capture] has no vm_networks, vm_interfaces or hypervisors and local = false: the router takes no traffic",
			Fix:     "name the hypervisors, list the VM subnets in vm_networks, or set local = true for app rules"})
	}
}
