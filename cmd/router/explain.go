package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// parseFlags parses args and returns an exit code when the command should stop: after
// --help (exitOK); on a bad flag, an argument left over, or a flag of required left
// without a value (exitUsage, with the command's name and the flags it requires on fs's
// output: "router lint: --config is required").
func parseFlags(fs *flag.FlagSet, args []string, required ...string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK, true
		}
		return exitUsage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "router: unexpected argument %q\n", fs.Arg(0))
		return exitUsage, true
	}
	for _, name := range required {
		if f := fs.Lookup(name); f.Value.String() == f.DefValue {
			verb := "is"
			if len(required) > 1 {
				verb = "are"
			}
			fmt.Fprintf(fs.Output(), "%s: --%s %s required\n", fs.Name(), strings.Join(required, " and --"), verb)
			return exitUsage, true
		}
	}
	return 0, false
}

func cmdExplain(args []string, stdout, stderr io.Writer) int {
	h := &hostAddrSet{}
	// Scoped: with local = false the capture leaves this host's own uncaged flows alone.
	return explain(args, stdout, stderr, policy.Env{HostAddr: h.has, Scoped: true})
}

// explain is `router explain`; env tells the policy this machine's addresses.
func explain(args []string, stdout, stderr io.Writer, env policy.Env) int {
	fs := newFlags("explain",
		"Shows what the router does with a flow: the implicit steps (DNS, local destinations, the\nhost off limits for caged traffic, fake IPs, DNS over TLS, caged traffic that no rule\ndecides) and the rules, with the field that did not match for each rule before the one that\ndecides. Nothing is sent anywhere; the daemon need not run.", stderr)
	cfgPath := fs.String("config", "", "the config `file`")
	app := fs.String("app", "", "the process's image `name`, e.g. VBoxHeadless.exe")
	path := fs.String("path", "", "the process's full `path`")
	var services stringList
	fs.Var(&services, "service", "a Windows service hosted by the process (repeatable)")
	src := fs.String("src", "", "the flow's source `IP` (a VM address)")
	fromVM := fs.Bool("from-vm", false, "the flow enters from a VM-facing interface (caged whatever its source)")
	dst := fs.String("dst", "", "the destination `HOST:PORT` (an IP or a name)")
	network := fs.String("network", "tcp", "tcp or udp")
	name := fs.String("name", "", "the `name` the router's DNS gave the destination's address for (a fake IP's name)")
	sni := fs.String("sni", "", "the `name` the client's first bytes carry: a TLS server name or an HTTP Host")
	resolved := fs.String("resolved", "", "the `addresses` (comma-separated) the flow's name resolves to through the proxy's resolver, as the daemon would look them up (none: the lookup finds nothing): explain does not resolve; with them it checks where a direct dial by name goes")
	asJSON := jsonFlag(fs)
	profile := fs.String("profile", "", "decide by this [profile.`NAME`]'s rules, as for a guest switched to it (router profile); default: the top-level rules")
	socket := fs.String("socket", "", "the running router's control `path`, to name a fake-IP pool address")
	goos := fs.String("os", "", "judge for this operating system (`linux` or windows: presets, app names); default this one")
	if code, stop := parseFlags(fs, args, "config", "dst"); stop {
		return code
	}
	cfg, err := conf.Load(*cfgPath, stateOptions(conf.Options{SkipSecrets: true, OS: *goos}))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	q, err := explainQuery(*network, *src, *dst, *app, *path, services)
	if err != nil {
		fmt.Fprintf(stderr, "router explain: %v\n", err)
		return exitUsage
	}
	q.FromVM = *fromVM
	for _, n := range []struct {
		flag string
		v    *string
		to   *string
	}{{"--name", name, &q.Host}, {"--sni", sni, &q.Sniffed}} {
		if *n.v == "" {
			continue
		}
		h, err := rules.ParseHost(*n.v)
		if err != nil || h.Kind != rules.HostName {
			fmt.Fprintf(stderr, "router explain: %s %q is not a host name\n", n.flag, *n.v)
			return exitUsage
		}
		*n.to = h.Name
	}
	if *resolved != "" {
		q.Resolved = []netip.Addr{}
		for _, v := range strings.Split(*resolved, ",") {
			if *resolved == "none" { // the name resolves to nothing
				break
			}
			a, err := netip.ParseAddr(strings.TrimSpace(v))
			if err != nil {
				fmt.Fprintf(stderr, "router explain: --resolved %q: %q is not an IP address\n", *resolved, v)
				return exitUsage
			}
			q.Resolved = append(q.Resolved, a.Unmap())
		}
	}
	pol := policy.New(cfg, env)
	if *profile != "" {
		var ok bool
		if pol, cfg, ok = profileOf(pol, cfg, *profile); !ok {
			fmt.Fprintf(stderr, "router explain: --profile %q: no such profile (defined: %s)\n", *profile, strings.Join(cfg.ProfileNames(), ", "))
			return exitUsage
		}
	}
	var notes []string
	if q.Dst.IsValid() && pol.InPool(q.Dst) && q.Host == "" {
		// A fake IP: the flow is decided by the name behind it, which only the daemon knows.
		name, note := poolName(cfg, *socket, q.Dst.String())
		q.Host = name
		notes = append(notes, note)
	}
	d, steps := pol.Explain(q)
	if q.Resolved == nil && pol.NeedsResolve(q) {
		notes = append(notes, "the daemon would look the name up through the proxy's resolver and check every address against the host walls before it decides; explain does not resolve (give the addresses with --resolved)")
	}
	// Where the name the rules saw came from, as the data path logs it.
	flowName, fromSniff := pol.Name(q)
	nameFrom := ""
	switch {
	case fromSniff:
		nameFrom = "sni"
	case flowName != "" && (*name != "" || q.Dst.IsValid()):
		nameFrom = "dns"
	}
	if *asJSON {
		o := explainJSON(cfg, pol, q, d, steps, notes)
		o.Flow.SNI, o.Flow.Name, o.Flow.NameFrom = q.Sniffed, flowName, nameFrom
		return writeJSON(stdout, stderr, o)
	}
	for _, p := range cfg.Capture.Presets {
		fmt.Fprintf(stdout, "preset %s: %s\n", p.Name, presetText(p))
	}
	if *profile != "" {
		fmt.Fprintf(stdout, "profile: %s\n", *profile)
	}
	fmt.Fprintf(stdout, "flow: %s\n", describeFlow(q, d.Caged))
	if nameFrom != "" {
		fmt.Fprintf(stdout, "name: %s (from %s)\n", flowName, nameFrom)
	}
	width := 0
	for _, s := range steps {
		width = max(width, len(ruleRef(s.Index, s.Name)))
	}
	for _, s := range steps {
		if s.Match {
			fmt.Fprintf(stdout, "  %-*s  matches\n", width, ruleRef(s.Index, s.Name))
			continue
		}
		fmt.Fprintf(stdout, "  %-*s  no: %s: %s\n", width, ruleRef(s.Index, s.Name), s.Field, s.Reason)
	}
	fmt.Fprintf(stdout, "verdict: %s\n", verdictText(cfg, d))
	if d.Step != policy.StepRule {
		fmt.Fprintf(stdout, "implicit: %s\n", pol.Why(q, d))
	}
	if d.Untrusted || d.Action == rules.Direct {
		if why := pol.DialWhy(q, d); why != "" {
			fmt.Fprintf(stdout, "dial: %s\n", why)
		}
	}
	if g := pol.GateWhy(q, d); g != "" {
		fmt.Fprintf(stdout, "gate: %s\n", g)
	}
	for _, n := range notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	return exitOK
}

// presetText says what a preset expanded to.
func presetText(p conf.Preset) string {
	var parts []string
	if len(p.Apps) > 0 {
		parts = append(parts, "caged apps "+strings.Join(p.Apps, ", "))
	}
	if len(p.Interfaces) > 0 {
		parts = append(parts, "VM interfaces "+strings.Join(p.Interfaces, ", "))
	}
	for _, n := range p.Networks {
		parts = append(parts, "VM network "+n.String())
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing capturable")
	}
	return strings.Join(parts, "; ") + " (NAT in " + p.NAT + " space)"
}

func explainQuery(network, src, dst, app, path string, services []string) (*policy.Flow, error) {
	q := &policy.Flow{Owner: rules.Owner{App: app, AppPath: path, Services: services}}
	n, ok := rules.ParseNetwork(network)
	if !ok {
		return nil, fmt.Errorf("--network %q: want tcp or udp", network)
	}
	q.Network = n
	if src != "" {
		a, err := netip.ParseAddr(src)
		if err != nil {
			return nil, fmt.Errorf("--src %q is not an IP address", src)
		}
		q.Src = a.Unmap()
	}
	host, port, err := net.SplitHostPort(dst)
	if err != nil {
		return nil, fmt.Errorf("--dst %q is not HOST:PORT", dst)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return nil, fmt.Errorf("--dst %q: %q is not a port", dst, port)
	}
	q.Port = uint16(p)
	if a, err := netip.ParseAddr(host); err == nil {
		q.Dst = a.Unmap()
	} else if h, err := rules.ParseHost(host); err == nil && h.Kind == rules.HostName {
		q.Host = h.Name
	} else {
		return nil, fmt.Errorf("--dst %q: %q is neither an IP address nor a host name", dst, host)
	}
	return q, nil
}

func describeFlow(q *policy.Flow, caged bool) string {
	var b strings.Builder
	if caged {
		b.WriteString("caged ")
	}
	b.WriteString(q.Network.String())
	if q.Src.IsValid() {
		b.WriteString(" from " + q.Src.String())
	}
	if q.FromVM {
		b.WriteString(" (from a VM-facing interface)")
	}
	if q.App != "" || q.AppPath != "" {
		b.WriteString(" by " + strings.TrimSpace(q.App+" "+q.AppPath))
	}
	if len(q.Services) > 0 {
		b.WriteString(" (services " + strings.Join(q.Services, ", ") + ")")
	}
	dst := q.Host
	if q.Dst.IsValid() {
		dst = q.Dst.String()
	}
	b.WriteString(" to " + net.JoinHostPort(dst, strconv.Itoa(int(q.Port))))
	if q.Host != "" && q.Dst.IsValid() {
		b.WriteString(" (" + q.Host + ")")
	}
	return b.String()
}

func ruleRef(i int, name string) string {
	if i < 0 {
		return name
	}
	return "rule #" + strconv.Itoa(i+1) + " " + strconv.Quote(name)
}

func verdictText(cfg *conf.Config, d policy.Decision) string {
	act := d.Action.String()
	if d.Action == rules.Proxy {
		act += " via " + d.Proxy
		if p, ok := cfg.Proxy(d.Proxy); ok {
			act += " (" + p.Address + ")"
		}
	}
	if d.Step == policy.StepDNS {
		act = "answered by the router's DNS"
	}
	if d.Index < 0 {
		return act + ", by the implicit step " + d.Step.String()
	}
	where := cfg.RuleFile(d.Index)
	if d.Index < len(cfg.RuleLines) {
		where += ":" + strconv.Itoa(cfg.RuleLines[d.Index])
	}
	return fmt.Sprintf("%s, by %s (%s)", act, ruleRef(d.Index, d.Name), where)
}

// hostAddrSet is this machine's addresses, read once.
type hostAddrSet struct {
	once sync.Once
	set  map[netip.Addr]bool
}

func (h *hostAddrSet) has(a netip.Addr) bool {
	h.once.Do(func() {
		h.set = map[netip.Addr]bool{}
		for _, a := range hostAddrs() {
			h.set[a] = true
		}
	})
	return h.set[a.Unmap()]
}

// hostAddrs lists this machine's addresses; an error leaves the list empty.
func hostAddrs() []netip.Addr {
	var out []netip.Addr
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}

func hostPrefixes() []netip.Prefix {
	var out []netip.Prefix
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-map[bool]int{true: 96, false: 0}[p.Addr().Is4In6()]).Masked())
		}
	}
	return out
}

type explainOut struct {
	Flow struct {
		Network  string   `json:"network"`
		Src      string   `json:"src,omitempty"`
		Dst      string   `json:"dst,omitempty"`
		Host     string   `json:"host,omitempty"`
		SNI      string   `json:"sni,omitempty"`       // --sni: the name the first bytes carry
		Name     string   `json:"name,omitempty"`      // the name the rules saw
		NameFrom string   `json:"name_from,omitempty"` // "dns" or "sni", as the flow log says
		Port     uint16   `json:"port"`
		App      string   `json:"app,omitempty"`
		Path     string   `json:"path,omitempty"`
		Services []string `json:"services,omitempty"`
	} `json:"flow"`
	Caged   bool `json:"caged"`
	Verdict struct {
		Action string `json:"action"`
		Proxy  string `json:"proxy,omitempty"`
		Rule   string `json:"rule"`
		Index  int    `json:"index"` // 1-based; 0 when an implicit step decided
		Line   int    `json:"line,omitempty"`
		Step   string `json:"step"`          // "rule", or the implicit step's name
		Why    string `json:"why,omitempty"` // the implicit step in words
		// Dial is where a direct verdict connects, in order: the destination's address, or
		// the addresses its name resolves to (--resolved; none given: empty) when the dial
		// goes by name; DialWhy says why in words.
		Dial    []string `json:"dial,omitempty"`
		DialWhy string   `json:"dial_why,omitempty"`
		// NameUntrusted: the name came from the flow's first bytes (--sni) and won the
		// verdict on the address given, so a direct dial goes to the name, never to it.
		NameUntrusted bool `json:"name_untrusted,omitempty"`
	} `json:"verdict"`
	Steps []rules.Step `json:"steps"`
	Note  string       `json:"note,omitempty"`
	// Gate is the model gate the flow meets (policy.Policy.Gate); nil: none.
	Gate *explainGate `json:"gate,omitempty"`
}

type explainGate struct {
	Forward string `json:"forward"`
	Raw     bool   `json:"raw"` // the forward is a raw pipe (api = "tcp")
	Why     string `json:"why"`
}

func explainJSON(cfg *conf.Config, pol *policy.Policy, q *policy.Flow, d policy.Decision, steps []rules.Step, notes []string) explainOut {
	var o explainOut
	o.Flow.Network, o.Flow.Port, o.Flow.Host, o.Flow.App, o.Flow.Path, o.Flow.Services = q.Network.String(), q.Port, q.Host, q.App, q.AppPath, q.Services
	if q.Src.IsValid() {
		o.Flow.Src = q.Src.String()
	}
	if q.Dst.IsValid() {
		o.Flow.Dst = q.Dst.String()
	}
	o.Caged = d.Caged
	o.Verdict.Action, o.Verdict.Proxy, o.Verdict.Rule, o.Verdict.Index = d.Action.String(), d.Proxy, d.Name, d.Index+1
	o.Verdict.Step = d.Step.String()
	o.Verdict.NameUntrusted = d.Untrusted
	if d.Action == rules.Direct {
		for _, a := range pol.DialAddrs(q, d) {
			if a.IsValid() {
				o.Verdict.Dial = append(o.Verdict.Dial, a.String())
			}
		}
	}
	if d.Untrusted || d.Action == rules.Direct {
		o.Verdict.DialWhy = pol.DialWhy(q, d)
	}
	if d.Step != policy.StepRule {
		o.Verdict.Why = pol.Why(q, d)
	}
	if d.Index >= 0 && d.Index < len(cfg.RuleLines) {
		o.Verdict.Line = cfg.RuleLines[d.Index]
	}
	for i := range steps {
		steps[i].Index++ // 1-based, as in the text output
	}
	o.Steps = steps
	if o.Steps == nil {
		o.Steps = []rules.Step{}
	}
	o.Note = strings.Join(notes, "; ")
	if g, ok := pol.Gate(q, d); ok {
		o.Gate = &explainGate{Forward: g.Forward, Raw: g.Raw, Why: pol.GateWhy(q, d)}
	}
	return o
}

func writeJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "router: write json: %v\n", err)
		return exitUsage
	}
	return exitOK
}
