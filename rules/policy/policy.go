// Package policy is the one flow decision: given a config, what happens to a flow. The
// Linux relay (package router), the Windows engine (package redirect) and `router explain`
// all call Decide, so they cannot disagree; the rule list itself is matched by package
// rules, and this package adds the implicit steps around it, in this order:
//
//  1. DNS (port 53) is answered by the router's own DNS server and never sent on, except a
//     host flow to its own loopback or addresses (a local stub resolver): StepDNS. With
//     [dns] capture = "caged", a query that is not caged is passed untouched:
//     StepDNSUncaged.
//  2. A local destination (IsLocal, or this machine's own address) is never captured and
//     goes direct: StepLocal. A caged flow (below) meets the host walls (walls.go): it
//     reaches this machine only at a forward's or an inbound's exact address and port, a
//     forward's connect address for a caged process, DHCP (StepHost, direct), or an address
//     and port that the direct rule deciding it names explicitly (StepRule); anything else
//     of the host is refused: StepHost.
//  3. With [capture] local = false, a flow that is not caged is this host's own and not
//     the router's business: it goes direct, whatever the rules say: StepUncaptured
//     (with Env.Scoped, as every capture is).
//  4. A fake-IP pool address that no DNS answer gave out is refused: StepNoName (only the
//     name makes such a flow routable, and nothing may guess it). A fake IP's flow whose
//     first bytes carry another name (Flow.Sniffed: a TLS server name or an HTTP Host that
//     disagrees with the name the address was given for) is refused: StepNameMismatch (a
//     guest that pins one name's address and asks the server for another).
//  5. The rules, first match wins. A caged flow is decided only by a rule that names it
//     (sources, apps, services) or its destination (hosts, ports), or by a catch-all that
//     keeps it caged (proxy or block): a direct rule without such fields is a catch-all for
//     this host's own traffic only. StepRule.
//     The rules see the flow's name (Name): a fake IP's, else the name its first bytes
//     carry, else a name seen in a DNS answer for its address; a host-name entry matches
//     that name only, never an address. A flow with no name meets only the rules' address
//     entries, so where the caged rules allow by name, an unnamed flow falls to the caged
//     end (6).
//  6. When no rule decides: a caged flow is refused (StepCaged), or held while the router
//     asks with [policy] unknown = "ask" (StepAsk, action Ask); any other goes direct
//     (StepNoMatch). A rule's action may be ask too (StepRule, action Ask): the router holds
//     the flow, asks, and on approval sends it through the Verdict's proxy.
//  7. A caged flow to another guest's network (an address in vm_networks) is refused unless
//     the deciding rule names that address in its hosts: StepToGuest.
//  8. A caged flow whose name resolves to this machine (loopback, link-local, unspecified
//     or one of its addresses) or to a guest's network is refused when its way out would
//     connect from this machine: a direct verdict by name (Decision.ByName: a fake IP, a
//     name an inbound's client asked for, or a name from the flow's first bytes that won
//     the verdict on an address of the guest's choosing, which never picks where a direct
//     dial goes: byname.go; the router resolves the name and connects itself), or a
//     proxy that runs on this machine (an `ssh -D`, tor or sing-box on 127.0.0.1, which
//     resolves the name and connects from here). Every address the name resolves to
//     meets the host walls as an address would. The capture resolves the name only when
//     NeedsResolve says so (Flow.Resolved); a name that could not be resolved is refused
//     too: StepHostName (or StepToGuest for a guest's address).
//  9. DNS past the router: a caged flow to a well-known DNS-over-HTTPS endpoint
//     (conf.DoHEndpoints, by name or address, and [dns] doh_hosts) is refused on every port
//     whatever the rules say, unless [dns] allow_doh = true: StepDoH (DoH, DoT and DoQ to
//     those resolvers alike; port 53 was answered at step 1). One function, DoH, decides
//     it from the flow's name (a fake IP's, a name seen in DNS, or one the capture read
//     from the flow) and its address.
//  10. QUIC: in a config whose caged rules allow by name (AllowsByName), a caged flow's UDP
//     to port 443 is refused unless the deciding rule is written for UDP (network =
//     "udp"): StepQUIC. Its name is sealed in the QUIC Initial, so browsers and HTTP/3
//     clients fall back to TCP, where the name is read (NeedsSniff). In other configs the
//     rules decide UDP 443 as any other UDP.
//  11. DNS over TLS or QUIC (port 853) leaves only through a proxy; a direct verdict is
//     turned into a refusal: StepDoT.
//  11. With [policy] unattended = true, what would be asked (step 6) is refused at once:
//     StepUnattended.
//
// ICMP is decided apart (DecideICMP): the router cannot carry it, so an echo request
// leaves only when it is this host's own (not caged, its process known) and local = false.
//
// A flow is caged when it comes from a VM network or a VM-facing interface (Flow.FromVM, or
// its source in [capture] vm_networks), or when its process is a caged app: one named by a
// proxy or block rule's apps or services, or by a hypervisor preset. Caged traffic goes
// where a rule sends it or is refused; it never goes direct by falling off the end of the
// list. A rule with caged = true matches caged flows only.
//
// The router's own traffic is not the policy's business: captures never hand it over
// (socket mark, PID), and no Flow describes it.
//
// A Policy is immutable and safe for concurrent use; a reload builds a new one.
package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/ports"
	"github.com/agentcage/router/rules"
)

// Step names what decided a flow.
type Step uint8

const (
	StepRule         Step = iota // a rule matched
	StepNoMatch                  // no rule matched a flow that is not caged: direct
	StepDNS                      // port 53: answered by the router's DNS server
	StepLocal                    // a local destination: never captured, direct
	StepHost                     // a caged flow to this host: a forward's or inbound's address and port, DHCP (direct), or refused
	StepNoName                   // a fake-IP pool address nobody was given: refused
	StepCaged                    // a caged flow that no rule decides: refused
	StepDNSUncaged               // DNS of a process that is not caged, with [dns] capture = "caged": passed
	StepUncaptured               // local = false and the flow is not caged: this host's own, direct
	StepICMP                     // an ICMP echo request (DecideICMP)
	StepDoT                      // DNS over TLS/QUIC not through a proxy: refused
	StepHostName                 // a caged flow whose name leads to this host from this host: refused
	StepToGuest                  // a caged flow to another guest's network no rule names: refused
	StepDoH                      // a caged flow to a well-known DNS-over-HTTPS endpoint: refused
	StepNameMismatch             // a fake IP's flow whose first bytes carry another name: refused
	StepQUIC                     // caged UDP to 443 in a config that allows by name, no UDP rule: refused
	StepAsk                      // a caged flow no rule decides, with [policy] unknown = "ask": held while the router asks
	StepUnattended               // an ask (a rule's or StepAsk) with [policy] unattended = true: refused at once
	StepCanary                   // a caged flow carrying a brokered credential's placeholder (Flow.Canary): refused

	// NumSteps is the number of steps, for tables indexed by Step.
	NumSteps = iota
)

// String is the step's name in verdicts (Decision.Name) and logs.
func (s Step) String() string {
	switch s {
	case StepRule:
		return "rule"
	case StepNoMatch:
		return rules.NoMatch
	case StepDNS:
		return "(dns: answered by the router)"
	case StepLocal:
		return "(local destination)"
	case StepHost:
		return "(host off limits)"
	case StepNoName:
		return "(fake IP nobody was given)"
	case StepCaged:
		return "(caged: no rule decides)"
	case StepDoT:
		return "(dns over tls: only through a proxy)"
	case StepDNSUncaged:
		return "(dns: not caged, passed)"
	case StepUncaptured:
		return "(not caged: this host's own)"
	case StepICMP:
		return "(icmp)"
	case StepHostName:
		return "(name resolves to this host)"
	case StepToGuest:
		return "(another guest's network)"
	case StepDoH:
		return "(dns over https: past the router)"
	case StepNameMismatch:
		return "(name disagrees with the fake IP's)"
	case StepQUIC:
		return "(quic: names are allowed over tcp only)"
	case StepAsk:
		return "(caged: no rule decides; ask)"
	case StepUnattended:
		return "(ask, unattended: refused)"
	case StepCanary:
		return "(canary: a credential's placeholder)"
	}
	return "step(" + strconv.Itoa(int(s)) + ")"
}

// Flow is what a capture knows of one flow. Decide never modifies it.
type Flow struct {
	Network rules.Network
	Src     netip.Addr // invalid when unknown
	Dst     netip.Addr // invalid when only a name is known (explain --dst NAME)
	Port    uint16
	// Host is the destination's name when one is known: a fake-IP mapping, a DNS answer
	// seen in proxy mode, or explain's --dst and --name.
	Host string
	// Sniffed is the name the client's first bytes carry (a TLS ClientHello's server name, an
	// HTTP/1 Host header: package router/sniff), when the capture read them (NeedsSniff) and
	// they carry one; explain's --sni. "" otherwise (an Encrypted Client Hello too). See Name.
	Sniffed string
	// Owner is the owning process as the capture knows it: its mark (CagedSocket) as the
	// capture read it, the rest when it looked the process up. Flows from VM networks have
	// no process (see NeedsOwner).
	rules.Owner
	// FromVM says the capture saw the flow enter from a VM network or a VM-facing
	// interface, whatever its source address. A source inside vm_networks counts without it.
	FromVM bool
	// Canary is the brokered credential ([[credential]]) whose placeholder the flow's first
	// bytes or name carry, as the capture found it (never its value); "" for none. A caged
	// flow that carries one is refused (StepCanary): a placeholder goes only to its forward.
	Canary string
	// Resolved are the addresses Host resolves to through the proxy's resolver, when the
	// capture looked them up because NeedsResolve asked for it; nil when it did not look,
	// empty (not nil) when the lookup failed or found no address.
	Resolved []netip.Addr
}

// Decision is the outcome for one flow.
type Decision struct {
	// Verdict is what happens: the action, the proxy, and the deciding rule's index and name;
	// for an implicit step, Index is -1 and Name the step's name. For StepDNS the action is
	// Block: the query itself never leaves, the router answers it.
	rules.Verdict
	Step Step
	// Rule is what the rule list said when it was consulted (StepRule, StepNoMatch,
	// StepCaged, StepDoT); the zero Verdict with Index -1 otherwise.
	Rule rules.Verdict
	// Caged tells whether the flow is caged (see the package documentation).
	Caged bool
	// Final is false when the flow's name was unknown and a rule with host names comes
	// before the deciding one: a capture that decides before the name is known (the Windows
	// engine at the SYN) must then let the router decide with the name.
	Final bool
	// ByName and Untrusted say where the direct way out the rules chose connects
	// (directByName, the one decision every path takes; DialAddrs gives the addresses):
	// ByName, to the flow's name as the router resolves it (Flow.Resolved), not to
	// Flow.Dst; Untrusted, because that name came from the flow's first bytes (Sniffed) and
	// won the verdict while the flow had an address of its own, which the guest chose. Both
	// are kept when a later step refuses the flow (the walls on the name's addresses), for
	// the flow log. False for a proxy (it gets the name) and a block rule.
	ByName, Untrusted bool
}

// Env is what the policy needs to know of the machine beyond the config. The zero Env is
// valid.
type Env struct {
	// HostAddr reports whether a is one of this machine's own addresses. Nil: none is known
	// (a capture that never hands such flows over need not say).
	HostAddr func(a netip.Addr) bool
	// CagedApps are processes the platform cages whatever the config says (on Windows the
	// known hypervisors' images, which its guard blocks too).
	CagedApps []rules.App
	// GuestNet reports whether a is inside the subnet of one of this machine's interfaces
	// whose name matches one of ifaces ([capture] vm_interfaces, a trailing * matching any
	// suffix, as the config wrote them): a guest's network the config knows by its
	// interface only. Nil: no interface is known (explain on another machine, tests).
	GuestNet func(ifaces []string, a netip.Addr) bool
	// Scoped says the capture takes this host's own traffic that is not caged only with
	// [capture] local = true, as both platforms' captures do: without local such a flow
	// is this host's own and goes direct (StepUncaptured). False: every flow handed over is
	// decided by the rules (tests that feed host flows to a config built in code).
	Scoped bool
}

// Policy is one config's compiled decision. See the package documentation.
type Policy struct {
	env   Env
	rules []rules.Rule
	all   *rules.Table
	// named holds the rules that may decide a caged flow (all but the direct catch-alls);
	// namedIdx maps its indexes back to positions in rules.
	named    *rules.Table
	namedIdx []int

	vmNets []netip.Prefix
	// guestNets are the guests' networks the config names (see GuestNetworks); vmIfaces the
	// VM-facing interfaces, whose subnets Env.GuestNet knows.
	guestNets []netip.Prefix
	vmIfaces  []string
	cagedApps rules.Rule // Apps and Services of the proxy and block rules, the presets' apps
	hasCaged  bool
	needOwner bool
	pool      netip.Prefix // the fake-IP pool; invalid outside fake-ip mode
	local     bool         // [capture] local: this host's own traffic is captured
	dnsAll    bool         // [dns] capture = "all": every process's DNS is answered
	// listenEnds are the forwards' and inbounds' listen addresses and ports, connectEnds
	// the forwards' connect addresses and ports (the host walls, walls.go). forwardAddrs
	// are the listen addresses: this host's, even where Env does not know them (explain on
	// another machine).
	listenEnds   []netip.AddrPort
	connectEnds  []netip.AddrPort
	forwardAddrs []netip.Addr
	gates        []gateEnd // the forwards' targets, in config order (gate.go)
	// proxyHosts are the upstreams' hosts (IP or name) by proxy name: for a chain (via),
	// every hop's, the last first.
	proxyHosts map[string][]string
	// doh matches the DNS-over-HTTPS endpoints refused to caged flows (one rule); nil with
	// [dns] allow_doh = true.
	doh *rules.Table
	// firstName and namedFirstName are the positions (in rules) of the first rule with a
	// host-name entry in each table, -1 for none.
	firstName, namedFirstName int
	// byName: some rule that may decide a caged flow allows (proxy or direct) by host name.
	byName bool
	// askUnknown holds a caged flow no rule decides (StepAsk), to be approved through
	// askProxy; unattended refuses what would be asked.
	askUnknown, unattended bool
	askProxy               string
	// portPoints are the ports where a flow's decision may change, in order (names.go).
	portPoints []uint16
	// name is the profile p was compiled for ("": the default); profiles and profileNames
	// are the config's other profiles (profile.go), nil in a profile's own Policy.
	name         string
	profiles     map[string]*Policy
	profileNames []string
	// canaries: the config brokers credentials ([[credential]]), so a caged TCP flow's first
	// bytes are read for their placeholders (NeedsSniff) and a flow carrying one refused.
	canaries bool
}

// CagedApp is one member of a config's caged-app set.
type CagedApp struct {
	App rules.App
	// Rule is the index in the config's rules of the proxy or block rule that names App;
	// -1 for [capture] caged_apps (a preset's images).
	Rule int
}

// CagedApps is the one definition of the processes a config cages: the apps of its enabled
// proxy and block rules (rules.Rule.Cages), in rule order, then [capture] caged_apps (the presets' images); and the
// Windows services its proxy and block rules name. A caged process's every flow is decided
// as a guest's. The images a platform cages whatever the config says (Env.CagedApps: the
// known hypervisors on Windows) are not in it. The policy, the Windows guard's plan and the
// Windows UDP scope all take the set from here.
func CagedApps(cfg *conf.Config) (apps []CagedApp, services []string) {
	for i := range cfg.Rules {
		r := &cfg.Rules[i]
		if !r.Cages() { // direct, or disabled
			continue
		}
		for _, a := range r.Apps {
			apps = append(apps, CagedApp{App: a, Rule: i})
		}
		services = append(services, r.Services...)
	}
	for _, a := range cfg.Capture.CagedApps {
		apps = append(apps, CagedApp{App: a, Rule: -1})
	}
	return apps, services
}

// New compiles the policy of cfg; a nil cfg is an empty config (no rules, no VM networks).
// It does not fail: cfg was validated by conf.
func New(cfg *conf.Config, env Env) *Policy {
	if cfg == nil {
		cfg = &conf.Config{}
	}
	p := &Policy{env: env, rules: cfg.Rules, vmNets: cfg.Capture.VMNetworks, firstName: -1, namedFirstName: -1}
	p.all = rules.Compile(cfg.Rules)
	var named []rules.Rule
	for i := range cfg.Rules {
		r := &cfg.Rules[i]
		if !r.HostOnly() {
			named = append(named, *r)
			p.namedIdx = append(p.namedIdx, i)
			if p.namedFirstName < 0 && hasName(r) {
				p.namedFirstName = i
			}
			p.byName = p.byName || hasName(r) && !r.Disabled && r.Action != rules.Block
		}
		if p.firstName < 0 && hasName(r) {
			p.firstName = i
		}
		p.needOwner = p.needOwner || len(r.Apps) > 0 || len(r.Services) > 0
	}
	p.named = rules.Compile(named)
	p.guestNets, p.vmIfaces = GuestNetworks(cfg), cfg.Capture.VMInterfaces
	if !cfg.DNS.AllowDoH {
		p.doh = rules.Compile([]rules.Rule{{Name: "doh", Hosts: DoHHosts(cfg), Action: rules.Block}})
	}
	caged, services := CagedApps(cfg)
	for _, c := range caged {
		p.cagedApps.Apps = append(p.cagedApps.Apps, c.App)
	}
	p.cagedApps.Services = services
	p.cagedApps.Apps = append(p.cagedApps.Apps, env.CagedApps...)
	p.hasCaged = len(p.cagedApps.Apps) > 0 || len(p.cagedApps.Services) > 0
	p.needOwner = p.needOwner || p.hasCaged
	if cfg.DNS.Mode == conf.DNSFakeIP {
		p.pool = cfg.DNS.Pool
	}
	p.local = cfg.Capture.Local
	p.askUnknown, p.askProxy, p.unattended = cfg.Policy.Unknown == rules.Ask, cfg.Policy.AskProxy, cfg.Policy.Unattended
	// A config built in code without the scope is judged as conf would default it.
	dc := cfg.DNS.Capture
	if dc == "" {
		dc = conf.DefaultDNSCapture(cfg.Capture.Local)
	}
	p.dnsAll = dc == conf.DNSCaptureAll
	p.proxyHosts = map[string][]string{}
	for _, px := range cfg.Proxies {
		hosts := []string{px.Host}
		// conf bounds a chain and refuses cycles; the bound here is for a config built in code.
		for q, n := &px, 0; q.Via != "" && n < len(cfg.Proxies); n++ {
			next, ok := cfg.Proxy(q.Via)
			if !ok {
				break
			}
			q = next
			hosts = append(hosts, q.Host)
		}
		p.proxyHosts[px.Name] = hosts
	}
	for _, f := range cfg.Forwards {
		p.listenEnds = append(p.listenEnds, unmapped(f.Listen))
		p.connectEnds = append(p.connectEnds, unmapped(f.Connect))
		if a := f.Listen.Addr(); !a.IsUnspecified() {
			p.forwardAddrs = append(p.forwardAddrs, a)
		}
	}
	p.gates = gateEnds(cfg)
	for _, in := range cfg.Inbounds {
		p.listenEnds = append(p.listenEnds, unmapped(in.Listen))
		if a := in.Listen.Addr(); !a.IsUnspecified() {
			p.forwardAddrs = append(p.forwardAddrs, a)
		}
	}
	p.portPoints = portPoints(cfg.Rules)
	p.canaries = len(cfg.Credentials) > 0
	p.compileProfiles(cfg, env)
	return p
}

func unmapped(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// hasName reports whether r names a destination by name (not an address range).
func hasName(r *rules.Rule) bool {
	for _, h := range r.Hosts {
		if h.Kind != rules.HostRange {
			return true
		}
	}
	return false
}

// NeedsSniff reports whether the decision for f may depend on the name its first bytes
// carry: f is caged TCP, not DNS, not to this machine, and some rule that may decide a caged
// flow names hosts. The capture then reads the client's first bytes before it decides (up to
// a short wait: a server-speaks-first protocol sends none), fills Sniffed, and sends the
// bytes on untouched. In a config whose caged rules name no host nothing waits: the name
// would change no decision.
func (p *Policy) NeedsSniff(f *Flow) bool {
	if (p.namedFirstName < 0 && !p.canaries) || f.Network != rules.TCP || f.Port == ports.DNS || !p.Caged(f) {
		return false
	}
	dst := f.Dst.Unmap()
	return !dst.IsValid() || !p.Local(dst)
}

// AllowsByName reports whether some rule that may decide a caged flow allows (proxy or
// direct) by a host name: the config is an allow-list by name, and caged QUIC is refused
// (StepQUIC).
func (p *Policy) AllowsByName() bool { return p.byName }

// Name is f's name as the rules see it, and where it came from: a fake IP's name (Host,
// "dns"); else the name its first bytes carry (Sniffed, "sni" or "host" as the capture
// says: fromSniff true); else Host (a name seen in a DNS answer for its address, or asked
// for by an inbound's client). A name seen in a DNS answer for a real address loses to the
// sniffed one: many names share an address, and the client says which it wants.
func (p *Policy) Name(f *Flow) (name string, fromSniff bool) {
	if f.Host != "" && (f.Sniffed == "" || p.InPool(f.Dst)) {
		return f.Host, false
	}
	return f.Sniffed, f.Sniffed != ""
}

// sameName reports whether two host names are the same name (case and a trailing dot aside).
func sameName(a, b string) bool {
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// DoHHosts returns the DNS-over-HTTPS endpoints cfg refuses to caged flows: the shipped
// list (conf.DoHEndpoints) and [dns] doh_hosts.
func DoHHosts(cfg *conf.Config) []rules.Host {
	var hs []rules.Host
	for _, s := range conf.DoHEndpoints() {
		if h, err := rules.ParseHost(s); err == nil { // conf's tests parse every entry
			hs = append(hs, h)
		}
	}
	return append(hs, cfg.DNS.DoHHosts...)
}

// DoH reports whether a flow named host (may be empty) to dst (may be invalid) goes to a
// DNS-over-HTTPS endpoint this policy refuses to caged flows (step 9): the one check, asked
// with whatever name the flow has, wherever it came from. Always false with allow_doh.
func (p *Policy) DoH(host string, dst netip.Addr) bool {
	if p.doh == nil {
		return false
	}
	q := rules.Query{Host: host, Dst: dst.Unmap()}
	return p.doh.Decide(&q).Index >= 0
}

// Rules returns the rule list, in order. The caller must not modify it.
func (p *Policy) Rules() []rules.Rule { return p.rules }

// VMNetworks returns the configured VM networks. The caller must not modify it.
func (p *Policy) VMNetworks() []netip.Prefix { return p.vmNets }

// FromVMNetwork reports whether a is inside a configured VM network.
func (p *Policy) FromVMNetwork(a netip.Addr) bool {
	a = a.Unmap()
	for _, n := range p.vmNets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// GuestNetworks is the one list of the guests' networks a config names: [capture]
// vm_networks (the cage subnets among them), and the sources the forwards and inbounds
// allow, whose clients are guests too. An allow range that is a whole family (0.0.0.0/0,
// ::/0) says "any source" and names no network. The subnets of the VM-facing interfaces
// are guests' networks as well; only the platform knows them (Env.GuestNet).
func GuestNetworks(cfg *conf.Config) []netip.Prefix {
	out := slices.Clone(cfg.Capture.VMNetworks)
	add := func(allow []netip.Prefix) {
		for _, n := range allow {
			if n.Bits() > 0 && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	for _, f := range cfg.Forwards {
		add(f.Allow)
	}
	for _, in := range cfg.Inbounds {
		add(in.Allow)
	}
	return out
}

// GuestNet reports whether a is inside a guest's network: one the config names
// (GuestNetworks), or the subnet of a VM-facing interface (Env.GuestNet). Its own address
// there is this machine's; HomeOf asks Local first.
func (p *Policy) GuestNet(a netip.Addr) bool {
	a = a.Unmap()
	for _, n := range p.guestNets {
		if n.Contains(a) {
			return true
		}
	}
	return len(p.vmIfaces) > 0 && p.env.GuestNet != nil && p.env.GuestNet(p.vmIfaces, a)
}

// InPool reports whether a is in the fake-IP pool (always false outside fake-ip mode).
func (p *Policy) InPool(a netip.Addr) bool { return p.pool.IsValid() && p.pool.Contains(a.Unmap()) }

// NeedsOwner reports whether the decision for f may depend on its process: some rule names
// apps or services (a caged app among them), and f does not come from a VM (VM traffic has
// no process on this host). Captures look the owner up only when it does.
func (p *Policy) NeedsOwner(f *Flow) bool {
	return p.needOwner && !f.FromVM && !p.FromVMNetwork(f.Src)
}

// DNSAll reports whether every process's DNS is answered ([dns] capture = "all"); when not,
// a DNS flow's decision depends on its process (see NeedsOwner).
func (p *Policy) DNSAll() bool { return p.dnsAll }

// Local reports whether this host's own traffic is captured ([capture] local).
func (p *Policy) LocalCapture() bool { return p.local }

// Caged reports whether f is caged: from a VM network or interface, or owned by a caged app.
func (p *Policy) Caged(f *Flow) bool {
	if f.FromVM || f.CagedSocket || p.FromVMNetwork(f.Src) {
		return true
	}
	if !p.hasCaged || !f.Named() {
		return false
	}
	q := rules.Query{Owner: f.Owner}
	return p.cagedApps.MatchApp(&q)
}

// Local reports whether a is a local destination: IsLocal, or one of this machine's own
// addresses.
func (p *Policy) Local(a netip.Addr) bool {
	return IsLocal(a) || p.hostAddr(a)
}

// hostAddr reports whether a is one of this machine's addresses: Env says so, or a forward
// listens on it.
func (p *Policy) hostAddr(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	a = a.Unmap()
	return p.env.HostAddr != nil && p.env.HostAddr(a) || slices.Contains(p.forwardAddrs, a)
}

// Decide decides f. See the package documentation for the steps.
func (p *Policy) Decide(f *Flow) Decision {
	d, _ := p.decide(f, false)
	return d
}

// Explain decides f like Decide and also lists, for each rule consulted up to the deciding
// one, whether it matched and, if not, why (a catch-all skipped for a caged flow has the
// Field "caged"). Implicit steps that decide before the rules leave steps empty.
func (p *Policy) Explain(f *Flow) (Decision, []rules.Step) {
	return p.decide(f, true)
}

func implicit(s Step, a rules.Action, caged bool) Decision {
	return Decision{Verdict: rules.Verdict{Action: a, Index: -1, Name: s.String()}, Step: s,
		Rule: rules.Verdict{Index: -1}, Caged: caged, Final: true}
}

func (p *Policy) decide(f *Flow, explain bool) (Decision, []rules.Step) {
	caged := p.Caged(f)
	if caged && f.Canary != "" {
		return implicit(StepCanary, rules.Block, caged), nil
	}
	dst := f.Dst.Unmap()
	local := dst.IsValid() && p.Local(dst)
	if f.Port == ports.DNS && (caged || !local || !(dst.IsLoopback() || p.hostAddr(dst))) {
		if !caged && !p.dnsAll {
			return implicit(StepDNSUncaged, rules.Direct, caged), nil
		}
		return implicit(StepDNS, rules.Block, caged), nil
	}
	if local && !caged {
		return implicit(StepLocal, rules.Direct, caged), nil
	}
	if local {
		// The host walls: the rules are asked only for a direct rule that names this
		// address and port.
		q := p.query(f, caged)
		v := p.decideCaged(&q)
		var steps []rules.Step
		if p.hostOpen(f, dst) {
			return implicit(StepHost, rules.Direct, caged), nil
		}
		if !p.ruleOpens(f, dst, v) {
			return implicit(StepHost, rules.Block, caged), nil
		}
		if explain {
			steps = p.steps(&q, caged, v.Index)
		}
		return Decision{Verdict: v, Step: StepRule, Rule: v, Caged: caged, Final: true}, steps
	}
	if !caged && !p.local && p.env.Scoped {
		return implicit(StepUncaptured, rules.Direct, caged), nil
	}
	if p.InPool(dst) && f.Host == "" {
		return implicit(StepNoName, rules.Block, caged), nil
	}
	if p.InPool(dst) && f.Sniffed != "" && !sameName(f.Host, f.Sniffed) {
		return implicit(StepNameMismatch, rules.Block, caged), nil
	}
	q := p.query(f, caged)
	var v rules.Verdict
	var steps []rules.Step
	first := p.firstName
	if caged {
		v = p.decideCaged(&q)
		first = p.namedFirstName
	} else {
		v = p.all.Decide(&q)
	}
	if explain {
		steps = p.steps(&q, caged, v.Index)
	}
	d := Decision{Verdict: v, Step: StepRule, Rule: v, Caged: caged,
		Final: q.Host != "" || first < 0 || (v.Index >= 0 && v.Index < first)}
	if v.Index < 0 {
		d.Step = StepNoMatch
		if caged && p.askUnknown {
			d.Step = StepAsk
			d.Verdict = rules.Verdict{Action: rules.Ask, Proxy: p.askProxy, Index: -1, Name: StepAsk.String()}
		} else if caged {
			d.Step = StepCaged
			d.Verdict = rules.Verdict{Action: rules.Block, Index: -1, Name: StepCaged.String()}
		}
	}
	if d.Action == rules.Direct {
		d.ByName, d.Untrusted = p.directByName(f, &q, caged, v)
	}
	if caged && d.Action != rules.Block {
		// dst is not this machine's (local is false): of the walls only a guest's network
		// is left to check.
		if p.GuestNet(dst) && !p.namesAddr(v.Index, dst) {
			d.Step, d.Verdict = StepToGuest, rules.Verdict{Action: rules.Block, Index: -1, Name: StepToGuest.String()}
		} else if f.Resolved != nil && p.connectsHere(f, d) {
			if s, ok := p.nameWall(f, v); !ok {
				d.Step, d.Verdict = s, rules.Verdict{Action: rules.Block, Index: -1, Name: s.String()}
			}
		}
	}
	if caged && d.Action != rules.Block && p.DoH(q.Host, dst) {
		d.Step, d.Verdict = StepDoH, rules.Verdict{Action: rules.Block, Index: -1, Name: StepDoH.String()}
	}
	if caged && p.byName && f.Network == rules.UDP && f.Port == ports.HTTPS && d.Action != rules.Block &&
		(v.Index < 0 || p.rules[v.Index].Network != rules.UDP) {
		d.Step = StepQUIC
		d.Verdict = rules.Verdict{Action: rules.Block, Index: -1, Name: StepQUIC.String()}
	}
	if f.Port == ports.DoT && d.Action == rules.Direct {
		d.Step = StepDoT
		d.Verdict = rules.Verdict{Action: rules.Block, Index: -1, Name: StepDoT.String()}
	}
	if d.Action == rules.Ask && p.unattended {
		d.Step = StepUnattended
		d.Verdict = rules.Verdict{Action: rules.Block, Index: -1, Name: StepUnattended.String()}
	}
	return d, steps
}

// query is f as the rules see it.
func (p *Policy) query(f *Flow, caged bool) rules.Query {
	name, _ := p.Name(f)
	return rules.Query{Network: f.Network, Src: f.Src.Unmap(), Dst: f.Dst.Unmap(), Port: f.Port, Host: name,
		Owner: f.Owner, Caged: caged}
}

// decideCaged is the rules' verdict for a caged flow: the rules that may decide one (no
// direct catch-all), with the index of the rule in the whole list.
func (p *Policy) decideCaged(q *rules.Query) rules.Verdict {
	v := p.named.Decide(q)
	if v.Index >= 0 {
		v.Index = p.namedIdx[v.Index]
	}
	return v
}

// CagedUDPPorts returns the destination ports a caged flow's UDP may leave to directly:
// 53 (DNS, answered by the router), and the ports of the direct rules that may decide a
// caged flow (they name its source, app, service, hosts or ports) and cover UDP. all is
// true when such a rule names no ports: then any port may. Every other UDP of a caged flow
// is dropped (no proxy carries it), so a capture may refuse it before it is sent, and leave
// every other UDP of this host alone when nothing else of the host is captured (local =
// false). The ranges are sorted and may overlap.
func (p *Policy) CagedUDPPorts() (udp []rules.PortRange, all bool) {
	udp = []rules.PortRange{{Lo: ports.DNS, Hi: ports.DNS}}
	for i := range p.rules {
		r := &p.rules[i]
		if r.Action != rules.Direct || r.Disabled || r.HostOnly() || r.Network == rules.TCP {
			continue
		}
		if len(r.Ports) == 0 {
			return nil, true
		}
		udp = append(udp, r.Ports...)
	}
	slices.SortFunc(udp, func(a, b rules.PortRange) int { return int(a.Lo) - int(b.Lo) })
	return slices.Compact(udp), false
}

// DecideICMP decides an outbound ICMP echo request (f.Network and f.Port are ignored): no
// proxy can carry it, so it passes only when it is this host's own (its process known and
// not caged) and local = false, and to a local destination when it is not caged. Anything
// else is refused: a caged process's, one whose process is unknown, and every one with
// local = true (the host's other ICMP is then refused, as on Linux).
func (p *Policy) DecideICMP(f *Flow) Decision {
	caged := p.Caged(f)
	known := f.App != "" || f.AppPath != "" || len(f.Services) > 0
	dst := f.Dst.Unmap()
	if !caged && dst.IsValid() && p.Local(dst) {
		return implicit(StepLocal, rules.Direct, caged)
	}
	if caged || !known || p.local {
		return implicit(StepICMP, rules.Block, caged)
	}
	return implicit(StepICMP, rules.Direct, caged)
}

// NeedsResolve reports whether the decision for f depends on what its name resolves to: f
// is caged, has a name that was not looked up yet (Resolved is nil), and the rules send it
// out from this machine (see StepHostName). The capture then resolves Host through the
// proxy's resolver, fills Resolved and decides again.
func (p *Policy) NeedsResolve(f *Flow) bool {
	if name, _ := p.Name(f); name == "" || f.Resolved != nil || !p.Caged(f) {
		return false
	}
	d, _ := p.decide(f, false)
	return d.Action != rules.Block && d.Step != StepHost && d.Step != StepLocal && d.Step != StepDNS && p.connectsHere(f, d)
}

// connectsHere reports whether d sends f out from this machine by its name: direct by name
// (Decision.ByName: a fake IP, a name only, a name from the first bytes; the router
// resolves the name and connects), or through a proxy on this machine.
func (p *Policy) connectsHere(f *Flow, d Decision) bool {
	switch d.Action {
	case rules.Direct:
		return d.ByName
	case rules.Proxy, rules.Ask: // an approved ask leaves through d.Proxy
		return p.ProxyOnHost(d.Proxy)
	}
	return false
}

// ProxyOnHost reports whether the named upstream runs on this machine: its address is
// local (loopback, link-local, unspecified) or one of this machine's, or its host name is
// localhost. An upstream given by another name is taken for a remote one. A chain counts as
// on this machine when any of its hops may be (a hop's address is written as the hop
// before it sees it, so a local-looking one is taken at its word).
func (p *Policy) ProxyOnHost(name string) bool {
	for _, h := range p.proxyHosts[name] {
		if a, err := netip.ParseAddr(h); err == nil {
			if p.Local(a) {
				return true
			}
			continue
		}
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		if h == "localhost" || strings.HasSuffix(h, ".localhost") {
			return true
		}
	}
	return false
}

// steps explains the rules up to the deciding one (win; -1: all of them).
func (p *Policy) steps(q *rules.Query, caged bool, win int) []rules.Step {
	var out []rules.Step
	for i := range p.rules {
		r := &p.rules[i]
		if caged && r.HostOnly() {
			out = append(out, rules.Step{Index: i, Name: r.Name, Field: "caged",
				Reason: "a direct rule that names no source, app, service, host or port applies to this host's own traffic only; this flow is caged"})
			continue
		}
		field, reason := r.Why(q)
		out = append(out, rules.Step{Index: i, Name: r.Name, Match: field == "", Field: field, Reason: reason})
		if i == win {
			break
		}
	}
	return out
}

// Why says in words why f got d (a decision of p for f), for explain and logs. For
// StepRule it names the rule.
func (p *Policy) Why(f *Flow, d Decision) string {
	dst := f.Host
	if f.Dst.IsValid() {
		dst = f.Dst.String()
	}
	caged := "the flow is caged (" + p.cagedBy(f) + ")"
	switch d.Step {
	case StepRule:
		return "rule " + strconv.Quote(d.Name) + " matched"
	case StepNoMatch:
		return "no rule matched and the flow is not caged, so it goes direct"
	case StepDNS:
		return "port 53 is DNS: the router's own DNS server answers it, and nothing is sent"
	case StepDNSUncaged:
		return "port 53 is DNS, but the flow is not caged and [dns] capture = \"caged\" answers caged processes only: it is passed untouched"
	case StepUncaptured:
		return "the flow is not caged and [capture] local = false: this host's own traffic is not the router's, so it goes direct whatever the rules say"
	case StepICMP:
		if d.Action == rules.Direct {
			return "an ICMP echo request of this host's own process (not caged, local = false): passed"
		}
		return "an ICMP echo request the router cannot carry: refused for caged processes, for a process it cannot name, and for all with local = true"
	case StepLocal:
		return dst + " is local (loopback, link-local, multicast, broadcast or this machine): the router never captures it, so it goes direct whatever the rules say"
	case StepHost:
		if d.Action == rules.Direct {
			return caged + " and " + dst + " is this machine or its link: " + p.openWhy(f) + ", which caged traffic may reach"
		}
		return caged + " and " + dst + " is this machine or its link: only the forwards' and inbounds' exact addresses and ports, a forward's target for the process that carries a guest, an address and port a direct rule names, and DHCP are open to caged traffic, so it is refused (the host is off limits)"
	case StepToGuest:
		return caged + " and " + dst + " is in a guest's network (a VM network, a VM-facing interface's subnet, or a source a forward or an inbound allows): no rule deciding it names that address, so it is refused"
	case StepNoName:
		return dst + " is in the fake-IP pool but no DNS answer gave it out: only its name could route it, so it is refused"
	case StepCaged:
		return caged + " and no rule that names it or its destination decides it: refused (caged traffic never goes direct by falling off the end of the rule list)"
	case StepHostName:
		way := "direct: the router resolves the name and connects from this machine"
		if d.Rule.Action == rules.Proxy {
			way = "through the proxy " + strconv.Quote(d.Rule.Proxy) + ", which runs on this machine and connects from here"
		}
		name, _ := p.Name(f)
		if len(f.Resolved) == 0 {
			return caged + ", the rules send it " + way + ", and its name " + strconv.Quote(name) + " could not be resolved to check that it does not lead to this machine: refused"
		}
		return caged + ", the rules send it " + way + ", and its name " + strconv.Quote(name) + " resolves to " + fmt.Sprint(f.Resolved) + ", this machine or its link, where the host walls let caged traffic reach only the forwards' and inbounds' addresses: it is refused"
	case StepNameMismatch:
		return dst + " is the fake IP given for " + strconv.Quote(f.Host) + ", but the flow's first bytes ask for " + strconv.Quote(f.Sniffed) + ": a guest that pins one name's address and asks for another is refused"
	case StepQUIC:
		return caged + ", it is UDP to port 443 (QUIC, whose name is sealed), and the caged rules allow by name: no rule written for UDP (network = \"udp\") decides it, so it is refused and the client falls back to TCP, where the name is read"
	case StepDoH:
		name := dst
		if f.Host != "" && f.Dst.IsValid() {
			name = f.Host + " (" + f.Dst.String() + ")"
		}
		return caged + " and " + name + " is a well-known DNS-over-HTTPS resolver: names asked there would pass the router's DNS, so it is refused whatever the rules say ([dns] allow_doh = true lets it through)"
	case StepAsk:
		if d.Action == rules.Ask {
			return caged + " and no rule that names it or its destination decides it, and [policy] unknown = \"ask\": it is held (accepted, nothing dialled) while the router asks; an approval sends it through the proxy " + strconv.Quote(d.Proxy) + ", a denial or no answer within ask_timeout refuses it"
		}
	case StepUnattended:
		by := "[policy] unknown = \"ask\""
		if d.Rule.Index >= 0 {
			by = "rule " + strconv.Quote(d.Rule.Name)
		}
		return "the flow would be asked about (" + by + "), but [policy] unattended = true: nobody is there to answer, so it is refused at once"
	case StepCanary:
		return caged + " and it carries the placeholder of the brokered credential " + strconv.Quote(f.Canary) + ", which goes only to its forward: the flow is refused, counted as canary and logged"
	case StepDoT:
		said := "direct, as no rule matched"
		if d.Rule.Index >= 0 {
			said = "direct by rule " + strconv.Quote(d.Rule.Name)
		}
		return "port 853 is DNS over TLS or QUIC, which would carry names past the router's DNS: only a proxy may take it, and the rules said " + said + ", so it is refused"
	}
	return d.Step.String()
}

// cagedBy says why a caged flow is caged.
func (p *Policy) cagedBy(f *Flow) string {
	switch {
	case f.FromVM:
		return "it enters from a VM-facing interface"
	case p.FromVMNetwork(f.Src):
		for _, n := range p.vmNets {
			if n.Contains(f.Src.Unmap()) {
				return "its source is in the VM network " + n.String()
			}
		}
	}
	who := f.App
	if who == "" {
		who = f.AppPath
	}
	return "its process " + strconv.Quote(who) + " is a caged app (named by a proxy or block rule, or a hypervisor preset)"
}
