package conf

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/agentcage/router/rules"
)

// Policy is the [policy] table: what happens to a caged flow no rule decides, and how the
// router asks about a flow held under ask (a rule's action = "ask", or unknown = "ask").
type Policy struct {
	// Unknown is the action for a caged flow no rule decides: rules.Block (the default) or
	// rules.Ask.
	Unknown rules.Action
	// AskProxy is the upstream an approved flow of unknown = "ask" goes through (an ask
	// rule names its own): the only proxy when one is defined.
	AskProxy string
	// AskTimeout is how long a held flow waits for an answer before it is refused.
	AskTimeout time.Duration
	// Unattended refuses at once what would be asked (nobody is there to answer); the
	// refusal is logged and counted as a denied ask.
	Unattended bool
	// Approved is the router's own rules file, where "always" answers are written and
	// from which they are read (DefaultApproved in StateDir unless the key names one,
	// relative to the config's directory). The user's config is never written.
	Approved string
	// StateDir is the state directory the config was read for (Options.StateDir); empty:
	// the router's own files sit beside the config.
	StateDir string

	asks bool // some rule's action is ask
}

// Asks reports whether anything may be asked: unknown = "ask" or an ask rule.
func (p Policy) Asks() bool { return p.Unknown == rules.Ask || p.asks }

// Console is the [console] table: the web console on this host. The zero value serves none.
type Console struct {
	// Listen is the console's IP:port; invalid when off. Loopback only unless UnsafeListen.
	Listen netip.AddrPort
	// UnsafeListen allows an address other than loopback, and clients other than this host.
	UnsafeListen bool
}

var (
	policyKeys  = []string{"unknown", "ask_proxy", "ask_timeout", "unattended", "approved"}
	consoleKeys = []string{"listen", "unsafe_listen"}
)

func (d *decoder) policy(c *Config, v any) {
	a, m, ok := d.section("policy", v, policyKeys)
	if !ok {
		return
	}
	if v, ok := m["unknown"]; ok {
		if s, ok := d.str(a.key("unknown"), v); ok {
			switch s {
			case "block":
				c.Policy.Unknown = rules.Block
			case "ask":
				c.Policy.Unknown = rules.Ask
			default:
				d.fail(a.key("unknown"), "%q is not block or ask (a caged flow no rule decides is refused, or held while the router asks)", s)
			}
		}
	}
	if v, ok := m["ask_timeout"]; ok {
		if t, ok := d.durationIn(a.key("ask_timeout"), v, time.Second, MaxAskTimeout, "a held flow keeps its client waiting"); ok {
			c.Policy.AskTimeout = t
		}
	}
	if v, ok := m["unattended"]; ok {
		c.Policy.Unattended, _ = d.boolean(a.key("unattended"), v)
	}
	if v, ok := m["approved"]; ok {
		if s, ok := d.str(a.key("approved"), v); ok {
			if s == "" {
				d.fail(a.key("approved"), "is empty")
			}
			c.Policy.Approved = s
		}
	}
	if v, ok := m["ask_proxy"]; ok {
		if s, ok := d.str(a.key("ask_proxy"), v); ok {
			if _, known := d.proxies[s]; !known {
				d.fail(a.key("ask_proxy"), "no proxy %q is defined%s", s, d.known(c))
			}
			c.Policy.AskProxy = s
		}
	}
	if c.Policy.Unknown == rules.Ask && c.Policy.AskProxy == "" {
		switch len(c.Proxies) {
		case 0:
			d.fail(a.key("unknown"), "unknown = \"ask\" but no [proxy.NAME] is defined (an approved flow leaves through a proxy)")
		case 1:
			c.Policy.AskProxy = c.Proxies[0].Name
		default:
			d.fail(a, "unknown = \"ask\" needs ask_proxy = \"NAME\" when several proxies are defined%s", d.known(c))
		}
	}
}

func (d *decoder) console(c *Config, v any) {
	c.Console.Listen, c.Console.UnsafeListen = d.loopbackListener("console", v, consoleKeys,
		"(where to serve the console, e.g. "+DefaultConsoleListen+")",
		"the console controls the cage; set unsafe_listen = true to serve it to other machines")
}

// ApprovedPath is the approved rules file of the config at file: p.Approved (relative to
// the config's directory) or DefaultApproved in the state directory (beside the config
// when there is none).
func (p Policy) ApprovedPath(file string) string {
	a := p.Approved
	if a == "" {
		return stateFile(p.StateDir, file, DefaultApproved)
	}
	if !filepath.IsAbs(a) {
		a = filepath.Join(filepath.Dir(file), a)
	}
	return a
}

// approved reads the approved rules file when the config asks (a missing file holds no
// rule) and places its rules before the first ask rule (approvedAt): an approval decides
// the flows that would have been asked, and nothing a rule before them decides.
func (d *decoder) approved(c *Config) {
	if !c.Policy.Asks() {
		return
	}
	path := c.Policy.ApprovedPath(d.file)
	data, err := d.opts.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		c.ApprovedAt = approvedAt(c.Rules)
		return
	}
	if err != nil {
		d.fail(at{path: "policy.approved"}, "read approved rules: %v", err)
		return
	}
	loc := locate(string(data))
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		d.errs.add(&Error{File: path, Msg: "syntax: " + err.Error()})
		return
	}
	sub := &decoder{file: path, loc: loc, opts: d.opts, readFile: d.readFile, proxies: d.proxies}
	sub.checkKeys(at{}, raw, []string{"rule"})
	own := &Config{File: path, Proxies: c.Proxies}
	if v, ok := raw["rule"]; ok {
		sub.rules(own, v)
	}
	for i, r := range own.Rules {
		a := at{path: "rule[" + strconv.Itoa(i+1) + "]"}
		if r.Action == rules.Ask {
			sub.fail(a.key("action"), "an approved rule does not ask")
		}
		if slices.ContainsFunc(c.Rules, func(u rules.Rule) bool { return u.Name == r.Name }) {
			sub.fail(a.key("name"), "%q is also the name of a rule of %s", r.Name, d.file)
		}
	}
	for _, e := range sub.errs.sorted(path) {
		d.errs.add(e)
	}
	at := approvedAt(c.Rules)
	c.Rules = slices.Insert(c.Rules, at, own.Rules...)
	c.RuleLines = slices.Insert(c.RuleLines, at, own.RuleLines...)
	c.ApprovedAt, c.ApprovedN = at, len(own.Rules)
}

// approvedAt is where the approved rules go in rs: before the first ask rule, or else
// before the bare direct rules that end the list (this host's own catch-all, which never
// decides a caged flow), so that the list still ends with its catch-all.
func approvedAt(rs []rules.Rule) int {
	for i, r := range rs {
		if r.Action == rules.Ask {
			return i
		}
	}
	at := len(rs)
	for at > 0 && rs[at-1].HostOnly() {
		at--
	}
	return at
}

// Approval is one "always" answer, as the approved rules file keeps it.
type Approval struct {
	Host  string // a name or an address
	Port  uint16
	Proxy string // the upstream it leaves through
	At    time.Time
	By    string // who answered (the console, `router ask`, with the client's address)
}

// Name is the approved rule's name: "approved HOST:PORT".
func (a Approval) Name() string {
	return "approved " + netJoin(a.Host, a.Port)
}

func netJoin(h string, p uint16) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]:" + strconv.Itoa(int(p))
	}
	return h + ":" + strconv.Itoa(int(p))
}

// block is the rule's text, with its comment.
func (a Approval) block() string {
	by := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, a.By)
	return fmt.Sprintf("# approved %s by %s\n[[rule]]\nname = %q\ncaged = true\nhosts = [%q]\nports = [%d]\naction = \"proxy\"\nproxy = %q\n",
		a.At.UTC().Format(time.RFC3339), by, a.Name(), a.Host, a.Port, a.Proxy)
}

const approvedHeader = "# The router's own rules: the destinations an administrator approved \"always\" when\n" +
	"# the router asked. The router writes this file (sorted by name) and reads it with the\n" +
	"# config; delete a rule to withdraw it, and reload.\n"

// WriteApproval adds a to the approved rules file at path (made when missing), kept sorted
// by rule name; a rule of the same name is replaced. The file is replaced whole (a
// temporary file renamed over it), so a reader never sees half of it.
func WriteApproval(path string, a Approval) error {
	if _, err := rules.ParseHost(a.Host); err != nil || a.Port == 0 {
		return fmt.Errorf("write approval: %q port %d is not a destination", a.Host, a.Port)
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write approval: %w", err)
	}
	blocks := map[string]string{}
	for _, b := range strings.Split(string(old), "\n\n") {
		if n := blockName(b); n != "" {
			blocks[n] = strings.Trim(b, "\n") + "\n"
		}
	}
	blocks[a.Name()] = a.block()
	names := make([]string, 0, len(blocks))
	for n := range blocks {
		names = append(names, n)
	}
	slices.Sort(names)
	var sb strings.Builder
	sb.WriteString(approvedHeader)
	for _, n := range names {
		sb.WriteString("\n" + blocks[n])
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil { // a state directory not made yet
		return fmt.Errorf("write approval: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(sb.String()), 0o600); err != nil {
		return fmt.Errorf("write approval: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write approval: %w", err)
	}
	return nil
}

// blockName is the rule name a block of the approved file holds, "" for the header.
func blockName(b string) string {
	for _, l := range strings.Split(b, "\n") {
		if v, ok := strings.CutPrefix(l, "name = "); ok {
			if s, err := strconv.Unquote(v); err == nil {
				return s
			}
		}
	}
	return ""
}

// RuleFile is the file rule i of c was read from: the approved rules file for an approved
// rule, else c.File.
func (c *Config) RuleFile(i int) string {
	if i >= c.ApprovedAt && i < c.ApprovedAt+c.ApprovedN {
		return c.Policy.ApprovedPath(c.File)
	}
	return c.File
}
