package proxifier

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
)

// Note kinds: what happened to a part of the profile.
const (
	NotCarried = "not carried" // dropped: the router has no counterpart, or it is unsafe
	Changed    = "changed"     // carried, but the router does it differently
	Carried    = "carried"     // carried as the router's own behaviour, said for the record
)

// Note is one thing Convert could not carry as written, at the profile's line.
type Note struct {
	Line int
	Kind string
	Msg  string
}

func (n Note) String() string {
	if n.Line > 0 {
		return fmt.Sprintf("%d: %s: %s", n.Line, n.Kind, n.Msg)
	}
	return n.Kind + ": " + n.Msg
}

// Options of Convert.
type Options struct {
	// Source names the profile in the header comment (its file name).
	Source string
}

// Result is a converted profile.
type Result struct {
	TOML  []byte
	Notes []Note // in the profile's line order
	// OS is the operating system the config is meant for: "windows" for a Windows profile,
	// "" (the one the router runs on) otherwise.
	OS string
}

type converter struct {
	p     *Profile
	out   strings.Builder
	notes []Note
	// proxies maps a profile proxy id to its [proxy.NAME]; chains a chain id to what a rule
	// names (one proxy or a failover list).
	proxies  map[string]string
	chains   map[string][]string
	types    map[string]string // the router's type of each carried profile proxy, by id
	defined  []string          // every [proxy.NAME] made, in order
	blocks   []block           // their tables, written once the rules say which are used
	used     map[string]bool
	rulesOut strings.Builder
	// localDirect is the first enabled Direct rule that names loopback and no port, or -1.
	localDirect int
}

func isLoopback(s string) bool {
	if strings.EqualFold(s, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	return err == nil && a.IsLoopback()
}

// block is one [proxy.NAME] table: its text, the proxy it is reached through, and the
// profile line it came from.
type block struct {
	name, via, text string
	line            int
	what            string // "profile proxy 100", for the note when nothing uses it
}

func (c *converter) note(line int, kind, format string, args ...any) {
	c.notes = append(c.notes, Note{Line: line, Kind: kind, Msg: fmt.Sprintf(format, args...)})
}

func (c *converter) printf(format string, args ...any) { fmt.Fprintf(&c.out, format, args...) }

func (c *converter) rprintf(format string, args ...any) {
	fmt.Fprintf(&c.rulesOut, format, args...)
}

// Convert writes the config that does what p does. It never fails: what it cannot carry is
// a Note, and the rule it belongs to is written as a comment (or without the entry, when
// the rest of the rule still says what the profile meant: see each note).
func Convert(p *Profile, opts Options) Result {
	c := &converter{p: p, proxies: map[string]string{}, chains: map[string][]string{}, types: map[string]string{}, used: map[string]bool{}}
	res := Result{}
	if strings.EqualFold(p.Platform, "Windows") {
		res.OS = "windows"
	}
	src := plain(opts.Source)
	if src == "" {
		src = "a Proxifier profile"
	}
	flavour := p.Platform
	if flavour == "" {
		flavour = "unknown platform"
	}
	c.printf("# Imported from %s (Proxifier profile version %s, %s) by `router import proxifier`.\n", src, orNone(p.Version), flavour)
	c.printf("# Each rule names the profile rule it came from; what could not be carried as written is\n")
	c.printf("# said where it was, and `router import` printed the list with the profile's lines.\n\n")
	if !strings.EqualFold(p.Platform, "Windows") {
		c.note(0, Changed, "the profile is for %s: the router runs on Windows and Linux, where its app names match processes of those names", flavour)
	}
	c.makeProxies()
	c.makeChains()
	c.writeRules() // into rulesOut; it says which proxies are used
	c.writeProxies()
	c.printf("[capture]\n# Proxifier takes this machine's own connections: so does the router.\nlocal = true\n\n")
	c.writeDNS()
	c.options()
	c.out.WriteString(c.rulesOut.String())
	slices.SortStableFunc(c.notes, func(a, b Note) int { return a.Line - b.Line })
	res.TOML, res.Notes = []byte(c.out.String()), c.notes
	return res
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// proxyType maps a profile proxy type to the router's.
func (c *converter) proxyType(px *Proxy) (string, bool) {
	switch px.Type {
	case "SOCKS5":
		return conf.ProxySOCKS5, true
	case "SOCKS4":
		return conf.ProxySOCKS4, true
	case "HTTPS":
		return conf.ProxyHTTP, true // Proxifier's HTTPS is an HTTP proxy that tunnels with CONNECT
	case "HTTP":
		c.note(px.Line, Changed, "proxy %s is type HTTP, which Proxifier uses for plain HTTP requests only; the router asks every HTTP proxy for CONNECT tunnels, which this one may refuse: test it with `router check-proxy`", px.ID)
		return conf.ProxyHTTP, true
	}
	c.note(px.Line, NotCarried, "proxy %s has type %q, which the router does not speak (socks5, socks4, http, https): rules that use it are not carried", px.ID, px.Type)
	return "", false
}

func proxyAddress(px *Proxy) (string, error) {
	host := strings.TrimSpace(px.Address)
	port, err := strconv.ParseUint(strings.TrimSpace(px.Port), 10, 16)
	if err != nil || port == 0 {
		return "", fmt.Errorf("port %q is not 1 to 65535", px.Port)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		if h, herr := rules.ParseHost(host); herr != nil || h.Kind != rules.HostName {
			return "", fmt.Errorf("address %q is neither an IP address nor a host name", host)
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port))), nil
}

// passwordEnv is the placeholder variable of proxy id's password.
func passwordEnv(id string) string {
	return "ROUTER_PROXY_" + strings.ToUpper(sanitize(id)) + "_PASSWORD"
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// proxyBody is one proxy's keys (without the via), or an error saying why it cannot be.
func (c *converter) proxyBody(px *Proxy, typ string) (string, error) {
	addr, err := proxyAddress(px)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "type = %s\naddress = %s\n", quote(typ), quote(addr))
	if px.Auth {
		switch {
		case px.Username == "":
			return "", fmt.Errorf("authentication is on without a user name")
		case len(px.Username) > 255 || strings.ContainsFunc(px.Username, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			return "", fmt.Errorf("the user name is longer than 255 bytes or holds a control character")
		case typ == conf.ProxySOCKS4:
			fmt.Fprintf(&b, "username = %s   # the SOCKS4 user ID\n", quote(px.Username))
		case typ == conf.ProxyHTTP && strings.ContainsRune(px.Username, ':'):
			return "", fmt.Errorf("the user name holds a colon, which HTTP Basic authentication cannot carry")
		default:
			fmt.Fprintf(&b, "username = %s\n", quote(px.Username))
			fmt.Fprintf(&b, "# The profile's password is not copied: set %s to it before `router run`\n# (or give password_file = \"PATH\" instead).\n", passwordEnv(px.ID))
			fmt.Fprintf(&b, "password_env = %s\n", quote(passwordEnv(px.ID)))
		}
	}
	return b.String(), nil
}

// writeProxies writes the tables of the proxies the rules use (and those they are reached
// through); the others become comments: lint refuses a proxy nothing uses.
func (c *converter) writeProxies() {
	for i := len(c.blocks) - 1; i >= 0; i-- { // a via comes before the proxy reached through it
		if b := &c.blocks[i]; c.used[b.name] && b.via != "" {
			c.used[b.via] = true
		}
	}
	var kept []string
	for _, b := range c.blocks {
		if c.used[b.name] {
			c.printf("%s\n", b.text)
			kept = append(kept, b.name)
			continue
		}
		c.note(b.line, NotCarried, "%s: no rule uses it (a proxy nobody uses is a lint error); it is written as a comment", b.what)
		c.printf("# not used by any rule:\n")
		for _, l := range strings.Split(strings.TrimSuffix(b.text, "\n"), "\n") {
			c.printf("# %s\n", l)
		}
		c.printf("\n")
	}
	c.defined = kept
}

func (c *converter) makeProxies() {
	for i := range c.p.Proxies {
		px := &c.p.Proxies[i]
		typ, ok := c.proxyType(px)
		if !ok {
			continue
		}
		if px.ID == "" {
			c.note(px.Line, NotCarried, "a proxy without an id: no rule can name it")
			continue
		}
		if _, dup := c.proxies[px.ID]; dup {
			c.note(px.Line, NotCarried, "a second proxy with id %s: rules name the first", px.ID)
			continue
		}
		body, err := c.proxyBody(px, typ)
		if err != nil {
			c.note(px.Line, NotCarried, "proxy %s: %v: rules that use it are not carried", px.ID, err)
			continue
		}
		name := "proxy" + sanitize(px.ID)
		c.proxies[px.ID] = name
		c.types[px.ID] = typ
		c.defined = append(c.defined, name)
		label := ""
		if px.Label != "" {
			label = " " + strconv.Quote(px.Label)
		}
		c.blocks = append(c.blocks, block{name: name, line: px.Line, what: "profile proxy " + px.ID,
			text: fmt.Sprintf("[proxy.%s]   # profile proxy %s%s (%s), line %d\n%s", name, px.ID, label, px.Type, px.Line, body)})
	}
}

func (c *converter) proxyByID(id string) *Proxy {
	for i := range c.p.Proxies {
		if c.p.Proxies[i].ID == id {
			return &c.p.Proxies[i]
		}
	}
	return nil
}

func (c *converter) makeChains() {
	for _, ch := range c.p.Chains {
		var hops []string
		ok := true
		for _, id := range ch.Proxies {
			n, found := c.proxies[id]
			if !found {
				c.note(ch.Line, NotCarried, "chain %s %q: its proxy %s is not carried (see its line) or not in the profile: rules that use the chain are not carried", ch.ID, ch.Name, id)
				ok = false
				break
			}
			if !slices.Contains(hops, n) {
				hops = append(hops, n)
			}
		}
		switch {
		case !ok:
			continue
		case len(hops) == 0:
			c.note(ch.Line, NotCarried, "chain %s %q has no enabled proxy: rules that use it are not carried", ch.ID, ch.Name)
			continue
		}
		switch ch.Type {
		case "simple":
			if len(ch.Proxies) > conf.MaxChain {
				c.note(ch.Line, NotCarried, "chain %s %q has %d proxies; the router chains at most %d", ch.ID, ch.Name, len(ch.Proxies), conf.MaxChain)
				continue
			}
			if len(hops) == 1 {
				c.chains[ch.ID] = hops
				continue
			}
			// Every hop after the first is a proxy of its own, reached through the one
			// before: a copy, since the profile may also use the proxy alone.
			prev := hops[0]
			for k, id := range ch.Proxies[1:] {
				px := c.proxyByID(id)
				body, _ := c.proxyBody(px, c.types[id]) // carried alone, so it carries here
				name := "chain" + sanitize(ch.ID)
				if k < len(ch.Proxies)-2 {
					name += "-hop" + strconv.Itoa(k+2)
				}
				c.blocks = append(c.blocks, block{name: name, via: prev, line: ch.Line, what: "hop " + strconv.Itoa(k+2) + " of profile chain " + ch.ID,
					text: fmt.Sprintf("[proxy.%s]   # hop %d of profile chain %s %q (simple), line %d: proxy %s reached through %s\n%svia = %s\n", name, k+2, ch.ID, ch.Name, ch.Line, id, prev, body, quote(prev))})
				c.defined = append(c.defined, name)
				prev = name
			}
			c.chains[ch.ID] = []string{prev}
		case "redundancy":
			c.chains[ch.ID] = hops
			c.note(ch.Line, Carried, "chain %s %q (redundancy) becomes a failover list, %s: the next proxy is tried when one fails; never direct", ch.ID, ch.Name, strings.Join(hops, ", "))
		case "load_balancing":
			c.chains[ch.ID] = hops
			c.note(ch.Line, Changed, "chain %s %q (load balancing) becomes a failover list in the profile's order, %s: every flow goes to the first proxy that works, the next only when it fails", ch.ID, ch.Name, strings.Join(hops, ", "))
		default:
			c.note(ch.Line, NotCarried, "chain %s %q has type %q (the router knows simple, redundancy, load_balancing): rules that use it are not carried", ch.ID, ch.Name, ch.Type)
		}
	}
}

// dnsProxy picks the proxy that carries DNS: the Default rule's, else the first one a rule
// uses, else the first defined.
func (c *converter) dnsProxy() string {
	var first string
	for i := len(c.p.Rules) - 1; i >= 0; i-- {
		r := &c.p.Rules[i]
		if !r.Enabled {
			continue
		}
		if names := c.target(r); len(names) > 0 {
			if i == len(c.p.Rules)-1 {
				return names[0]
			}
			first = names[0]
		}
	}
	if first != "" {
		return first
	}
	return c.defined[0]
}

// target is what a rule's action names: its proxy, or its chain's proxies.
func (c *converter) target(r *Rule) []string {
	switch r.Action {
	case "Proxy":
		if n, ok := c.proxies[r.ActionID]; ok {
			return []string{n}
		}
	case "Chain":
		return c.chains[r.ActionID]
	}
	return nil
}

func (c *converter) writeDNS() {
	p := c.p
	via := p.ViaProxy
	switch {
	case via.Set && via.On:
		c.note(via.Line, Carried, "names are resolved through the proxy: the router answers every captured query with a fake address and hands the name to the proxy (fake-ip)")
	case via.Set:
		c.note(via.Line, Changed, "the profile resolves names on this machine; the router never does (that lookup is the DNS leak it prevents): it answers captured queries itself and hands the names to the proxy (fake-ip), and only direct_names are resolved here")
	}
	if p.TryLocalFirst.Set && p.TryLocalFirst.On {
		c.note(p.TryLocalFirst.Line, NotCarried, "\"try local DNS first\": the router never asks this machine's resolver first, for no name but direct_names")
	}
	var names []string
	for _, s := range p.Exclusions.Items {
		switch {
		case strings.EqualFold(s, "%SimpleHostnames%"):
			c.note(p.Exclusions.Line, NotCarried, "exclusion %s (names without a dot): the router has no pattern for them; such names go to the proxy like any other", s)
			continue
		case strings.EqualFold(s, "%ComputerName%"):
			c.note(p.Exclusions.Line, NotCarried, "exclusion %s: this machine's name is not known when importing; add it to direct_names by hand", s)
			continue
		}
		h, err := rules.ParseHost(s)
		switch {
		case err != nil:
			c.note(p.Exclusions.Line, NotCarried, "exclusion %q: direct_names take names and *.suffix: %v", s, err)
		case h.Kind == rules.HostRange:
			c.note(p.Exclusions.Line, NotCarried, "exclusion %q is an address: addresses are never resolved, nothing to exclude", s)
		default:
			if !slices.Contains(names, h.String()) {
				names = append(names, h.String())
			}
		}
	}
	c.printf("[dns]\n")
	if via.Set {
		c.printf("# the profile's \"resolve hostnames through proxy\" (line %d) was %v\n", via.Line, via.On)
	}
	c.printf("mode = \"fake-ip\"\n")
	if len(c.defined) > 0 {
		c.printf("proxy = %s\n", quote(c.dnsProxy()))
	}
	if len(names) > 0 {
		c.printf("# the profile's exclusion list (line %d): resolved by this machine's resolver\n", p.Exclusions.Line)
		c.printf("direct_names = %s\n", quoteList(names))
	}
	c.printf("\n")
}

func (c *converter) options() {
	p := c.p
	if p.UDP.Line > 0 {
		c.note(p.UDP.Line, Changed, "UDP mode %q: the router sends a proxy rule's UDP through SOCKS5 UDP ASSOCIATE when its proxy is a SOCKS5 one reached directly, and drops it otherwise; never direct", p.UDP.Text)
	}
	if p.LeakPrevention.Set && p.LeakPrevention.On {
		c.note(p.LeakPrevention.Line, Carried, "leak prevention: the router always keeps what a proxy rule takes from leaving direct, also when the proxy or the router is down (the guard)")
	}
	for _, o := range p.Others {
		switch o.Name {
		case "ProcessServices":
			c.note(o.Line, Carried, "services: the router sees the services inside svchost.exe on Windows (a rule's services = [...]) and captures them like any process")
		case "ProcessOtherUsers":
			c.note(o.Line, Carried, "other users' processes: the router captures every process of this machine")
		case "HandleDirectConnections":
			c.note(o.Line, NotCarried, "\"handle direct connections\": the router relays direct flows with its own sockets always; nothing to set")
		case "HttpProxiesSupport":
			c.note(o.Line, NotCarried, "HTTP proxies support: the router asks HTTP proxies for CONNECT tunnels only")
		}
	}
}

func (c *converter) writeRules() {
	seen := map[string]int{}
	cagingApps, lastDirectBare := false, false
	c.localDirect = -1
	for i := range c.p.Rules {
		r := &c.p.Rules[i]
		name := r.Name
		if name == "" {
			name = "rule-" + strconv.Itoa(i+1)
		}
		if n := seen[name]; n > 0 {
			seen[name] = n + 1
			name = fmt.Sprintf("%s (%d)", name, n+1)
		} else {
			seen[name] = 1
		}
		mark := len(c.notes)
		body, why := c.rule(r)
		if why != "" {
			c.notes = c.notes[:mark] // the rule's own reason says it all
		}
		c.rprintf("# profile rule %s, line %d", strconv.Quote(plain(r.Name)), r.Line)
		if !r.Enabled {
			c.rprintf(" (disabled in the profile)")
		}
		c.rprintf("\n")
		for _, n := range c.notes[mark:] {
			c.rprintf("# %s (line %d): %s\n", n.Kind, n.Line, strings.TrimPrefix(n.Msg, "rule "+strconv.Quote(r.Name)+": "))
		}
		if why != "" {
			c.note(r.Line, NotCarried, "rule %q: %s; it is written as a comment", r.Name, why)
			c.rprintf("# not carried: %s\n", why)
			for _, l := range strings.Split(strings.TrimSuffix("[[rule]]\nname = "+quote(name)+"\n"+body, "\n"), "\n") {
				c.rprintf("# %s\n", l)
			}
			c.rprintf("\n")
			continue
		}
		c.rprintf("[[rule]]\nname = %s\n", quote(name))
		if !r.Enabled {
			c.rprintf("enabled = false\n")
		}
		c.rprintf("%s\n", body)
		if r.Enabled && r.Action != "Direct" && len(r.Applications.Items) > 0 {
			cagingApps = true
		}
		lastDirectBare = r.Enabled && r.Action == "Direct" && len(r.Applications.Items)+len(r.Targets.Items)+len(r.Ports.Items) == 0
		if r.Enabled && r.Action == "Direct" && c.localDirect < 0 && len(r.Ports.Items) == 0 && slices.ContainsFunc(r.Targets.Items, isLoopback) {
			c.localDirect = i
		}
	}
	if cagingApps && c.localDirect >= 0 {
		r := &c.p.Rules[c.localDirect]
		c.note(r.Line, Changed, "rule %q sends this machine's own addresses direct on any port, but the apps of proxy and block rules are caged, and a caged app reaches this machine only on the ports a direct rule or a forward names: name the port (the model's), or give it a [[forward]], the router's replacement for netsh portproxy", r.Name)
	}
	if cagingApps && lastDirectBare {
		last := &c.p.Rules[len(c.p.Rules)-1]
		c.note(last.Line, Changed, "rule %q sends the rest direct, but not the apps of proxy and block rules: the router cages those, and their flows that no rule takes are refused, never sent direct", last.Name)
	}
}

// rule writes one rule's match fields and action, or says why it cannot be carried.
func (c *converter) rule(r *Rule) (body, why string) {
	var b strings.Builder
	var apps []string
	for _, s := range r.Applications.Items {
		s = strings.Trim(s, "\"")
		if _, err := rules.ParseApp(s); err != nil {
			c.note(r.Applications.Line, NotCarried, "rule %q: application %q: %v", r.Name, s, err)
			continue
		}
		apps = append(apps, s)
	}
	if len(r.Applications.Items) > 0 && len(apps) == 0 {
		return "", "none of its applications can be carried"
	}
	hosts, any := c.targets(r)
	if !any && len(r.Targets.Items) > 0 && len(hosts) == 0 {
		return "", "none of its targets can be carried (a rule without them would match every destination)"
	}
	var ports []string
	for _, s := range r.Ports.Items {
		s = strings.ReplaceAll(s, " ", "")
		if _, err := rules.ParsePorts(s); err != nil {
			c.note(r.Ports.Line, NotCarried, "rule %q: port %q: %v", r.Name, s, err)
			continue
		}
		ports = append(ports, s)
	}
	if len(r.Ports.Items) > 0 && len(ports) == 0 {
		return "", "none of its ports can be carried"
	}
	if len(apps) > 0 {
		fmt.Fprintf(&b, "apps = %s\n", quoteList(apps))
	}
	if len(hosts) > 0 && !any {
		fmt.Fprintf(&b, "hosts = %s\n", quoteList(hosts))
	}
	if len(ports) > 0 {
		fmt.Fprintf(&b, "ports = %s\n", quoteList(ports))
	}
	switch r.Action {
	case "Direct":
		b.WriteString("action = \"direct\"\n")
	case "Block":
		b.WriteString("action = \"block\"\n")
	case "Proxy", "Chain":
		names := c.target(r)
		if len(names) == 0 {
			// Left out, the rule's flows would fall to a later rule, often the Default
			// direct one: what the profile sent through a proxy would leave unproxied.
			c.note(r.Line, NotCarried, "rule %q: its %s %s is not carried (see its line) or not in the profile: it is written as a block rule, so what it matches is refused (its apps stay caged) rather than left to a later rule such as a direct Default; carry that proxy another way and make the rule a proxy rule again", r.Name, strings.ToLower(r.Action), r.ActionID)
			b.WriteString("action = \"block\"   # its proxy is not carried: refused, never direct\n")
			return b.String(), ""
		}
		b.WriteString("action = \"proxy\"\n")
		if len(names) == 1 {
			fmt.Fprintf(&b, "proxy = %s\n", quote(names[0]))
		} else {
			fmt.Fprintf(&b, "proxy = %s   # failover, in order\n", quoteList(names))
		}
		for _, n := range names {
			c.used[n] = true
		}
	default:
		return b.String(), fmt.Sprintf("action %q is none of Direct, Block, Proxy, Chain", r.Action)
	}
	return b.String(), ""
}

// targets converts a rule's targets; any is true when one of them is "*" (every target).
// Linear in the targets: a set, not a search of the list, drops the repeated ones.
func (c *converter) targets(r *Rule) (hosts []string, any bool) {
	seen := make(map[string]struct{}, len(r.Targets.Items))
	for _, s := range r.Targets.Items {
		h, why := target(s)
		if _, dup := seen[h]; dup {
			continue
		}
		switch {
		case h == "*":
			any = true
		case why != "":
			c.note(r.Targets.Line, NotCarried, "rule %q: target %q: %s; the rule is carried without it", r.Name, s, why)
		default:
			seen[h] = struct{}{}
			hosts = append(hosts, h)
		}
	}
	return hosts, any
}

// target converts one Proxifier target to a hosts entry, or says why it cannot.
func target(s string) (string, string) {
	s = strings.TrimSpace(s)
	switch {
	case s == "*":
		return "*", ""
	case strings.EqualFold(s, "%ComputerName%"):
		return "", "this machine's own name; the router never sends this host's own flows to itself anywhere but direct (local stays local), so nothing is lost"
	case strings.HasPrefix(s, "%"):
		return "", "the router has no counterpart for this placeholder"
	}
	if lo, hi, ok := strings.Cut(s, "-"); ok && looksIP(lo) {
		s = strings.TrimSpace(lo) + "-" + strings.TrimSpace(hi)
	}
	if cidr, ok := ipWildcard(s); ok {
		s = cidr
	} else if strings.Contains(s, "*") && !strings.HasPrefix(s, "*.") || strings.Count(s, "*") > 1 {
		return "", "the router matches names exactly or by *.suffix (subdomains), and addresses by CIDR or range: this wildcard has no counterpart"
	}
	h, err := rules.ParseHost(s)
	if err != nil {
		return "", err.Error()
	}
	return h.String(), ""
}

func looksIP(s string) bool {
	s = strings.TrimSpace(s)
	_, err := netip.ParseAddr(s)
	return err == nil
}

// ipWildcard turns "192.168.*" or "10.1.*.*" into a CIDR; a '*' before a number
// ("192.168.*.1") has none.
func ipWildcard(s string) (string, bool) {
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 4 || !strings.Contains(s, "*") {
		return "", false
	}
	var oct [4]byte
	fixed := 0
	for i, p := range parts {
		if p == "*" {
			for _, q := range parts[i:] {
				if q != "*" {
					return "", false
				}
			}
			break
		}
		n, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return "", false
		}
		oct[i] = byte(n)
		fixed++
	}
	if fixed == 0 {
		return "", false
	}
	return netip.PrefixFrom(netip.AddrFrom4(oct), 8*fixed).String(), true
}

// quote writes s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = quote(x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
