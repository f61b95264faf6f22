// Package learn turns a session of caged traffic, read from the router's flow log ([log]
// flows), into what it did (each destination with its flows, bytes, ports and first and
// last time seen) and into a proposed allow-list: rules with hosts, one per registrable
// domain, the shipped host presets used where they cover what was seen.
//
// The flow log is input the guest shaped (a name is a TLS server name or a Host header it
// sent), so nothing of it reaches the proposed TOML unless it is a plain host name (letters,
// digits, '-', '_' and dots): a name that is not is counted and left out, never quoted.
package learn

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentcage/router/router/auditlog"
	"golang.org/x/net/publicsuffix"
)

// Destination is what the session did with one destination: a name, or an address that
// came without one.
type Destination struct {
	Name     string     // lower case, no final dot; "" for an address alone
	Addr     netip.Addr // when Name is ""
	Ports    map[uint16]int
	Networks map[string]int
	Flows    int // carried (or failed to connect)
	Refused  int
	Reasons  map[string]int // of the refused ones
	Up, Down int64
	First    time.Time
	Last     time.Time
	Proxies  map[string]int // the upstreams that carried its flows
}

// Session is what a flow log told: its caged flows by destination.
type Session struct {
	Dest    map[string]*Destination // by name, or by address for the unnamed
	Records int                     // caged flow and refusal records read
	Other   int                     // records skipped: uncaged flows, forwards, dropped lines
	BadName int                     // records whose name is no plain host name
	First   time.Time
	Last    time.Time
}

// NewSession returns an empty Session.
func NewSession() *Session { return &Session{Dest: map[string]*Destination{}} }

// LineError is a line of the flow log that is not a record.
type LineError = auditlog.LineError

// Read adds the records of the flow log r (named file, for errors) to s. A line that is
// not a JSON record ends the read with a *LineError, except a last line cut short (the
// daemon may be writing it).
func (s *Session) Read(r io.Reader, file string) error {
	return auditlog.Read(r, file, s.Add)
}

// Add counts one record: a caged flow that ended or was refused. Other records (this
// host's own flows, the forwards', dropped lines) are counted in Other only.
func (s *Session) Add(rec auditlog.Record) {
	if !rec.Caged || (rec.Event != "flow" && rec.Event != "refused") {
		s.Other++
		return
	}
	port, addr := rec.Dst.Port(), rec.Dst.Addr().Unmap()
	if !addr.IsValid() {
		port = rec.DstPort
	}
	key, name := "", strings.TrimSuffix(strings.ToLower(rec.Name), ".")
	switch {
	case name != "" && !plainName(name):
		s.BadName++
		return
	case name != "":
		key = name
	case addr.IsValid():
		key = addr.String()
	default:
		s.Other++
		return
	}
	s.Records++
	d := s.Dest[key]
	if d == nil {
		d = &Destination{Name: name, Ports: map[uint16]int{}, Networks: map[string]int{}, Reasons: map[string]int{},
			Proxies: map[string]int{}, First: rec.Time}
		if name == "" {
			d.Addr = addr
		}
		s.Dest[key] = d
	}
	if port != 0 {
		d.Ports[port]++
	}
	d.Networks[cmp.Or(rec.Network, "tcp")]++
	if rec.Event == "refused" {
		d.Refused++
		d.Reasons[cmp.Or(rec.Reason, "refused")]++
	} else {
		d.Flows++
		if rec.Action == "proxy" && rec.Upstream != "" {
			d.Proxies[rec.Upstream]++
		}
	}
	d.Up += rec.Up
	d.Down += rec.Down
	if rec.Time.Before(d.First) {
		d.First = rec.Time
	}
	if rec.Time.After(d.Last) {
		d.Last = rec.Time
	}
	if s.First.IsZero() || rec.Time.Before(s.First) {
		s.First = rec.Time
	}
	if rec.Time.After(s.Last) {
		s.Last = rec.Time
	}
}

// plainName reports whether name is a host name that may be written into a config as it is:
// dot-separated labels of letters, digits, '-' and '_', at most 253 bytes, not an address.
func plainName(name string) bool {
	if name == "" || len(name) > 253 || strings.HasPrefix(name, ".") || strings.Contains(name, "..") {
		return false
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Sorted returns the destinations, most flows first, then by name or address.
func (s *Session) Sorted() []*Destination {
	out := make([]*Destination, 0, len(s.Dest))
	for _, d := range s.Dest {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *Destination) int {
		if c := cmp.Compare(b.Flows+b.Refused, a.Flows+a.Refused); c != 0 {
			return c
		}
		return cmp.Compare(a.key(), b.key())
	})
	return out
}

func (d *Destination) key() string {
	if d.Name != "" {
		return d.Name
	}
	return d.Addr.String()
}

// PortList returns the ports seen, ascending.
func (d *Destination) PortList() []uint16 {
	ps := make([]uint16, 0, len(d.Ports))
	for p := range d.Ports {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// PortsText is the ports seen, ascending, comma separated; "" when none was.
func (d *Destination) PortsText() string {
	ps := d.PortList()
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

// Preset is a shipped host list a suggestion may name instead of the hosts it covers.
type Preset struct {
	Name  string
	Hosts []string // names and *.suffix entries
}

// covers reports whether the preset's list holds name.
func (p Preset) covers(name string) bool {
	for _, h := range p.Hosts {
		if suffix, ok := strings.CutPrefix(h, "*."); ok {
			if strings.HasSuffix(name, "."+suffix) {
				return true
			}
		} else if h == name {
			return true
		}
	}
	return false
}

// Options shape a suggestion.
type Options struct {
	Proxy   string   // the upstream the rules name; "" takes the one that carried most flows
	Presets []Preset // the shipped host presets, tried in this order
	Source  string   // what the session was read from, for the header
	// Collapse is the number of names of one registrable domain past which the rule names
	// the domain's subdomains (*.domain) instead of each; 0 takes 8.
	Collapse int
}

// maxPorts is the most ports a rule lists; a destination seen on more gets no ports key.
const maxPorts = 4

type group struct {
	title  string   // the registrable domain, or the preset's name
	preset string   // a preset's name
	hosts  []string // the names (or *.domain) the rule lists
	seen   []string // the names of the session it covers
	ports  map[uint16]bool
	flows  int
	bytes  int64
}

// Suggest writes a proposed allow-list: for each preset that covers a name of the session,
// a rule naming the preset; for each other registrable domain, a rule with its names (or
// *.domain past Options.Collapse names); all caged, proxied through one upstream, with the
// ports seen (up to maxPorts). Addresses that came without a name, names left out and the
// destinations refused while learning follow as comments. It returns an error only when
// writing fails or no upstream is known.
func (s *Session) Suggest(w io.Writer, o Options) error {
	collapse := cmp.Or(o.Collapse, 8)
	proxy := o.Proxy
	if proxy == "" {
		proxy = s.topProxy()
	}
	if proxy == "" {
		return fmt.Errorf("no flow of the session went through a proxy: name one (--proxy)")
	}
	if !plainName(strings.ToLower(proxy)) && !validKey(proxy) {
		return fmt.Errorf("the proxy name %q cannot be written as it is", proxy)
	}
	groups := map[string]*group{}
	var order []string
	add := func(key, title string, d *Destination) *group {
		g := groups[key]
		if g == nil {
			g = &group{title: title, ports: map[uint16]bool{}}
			groups[key] = g
			order = append(order, key)
		}
		g.seen = append(g.seen, d.Name)
		g.flows += d.Flows
		g.bytes += d.Up + d.Down
		for p := range d.Ports {
			g.ports[p] = true
		}
		return g
	}
	var unnamed, refused []*Destination
	for _, d := range s.Sorted() {
		switch {
		case d.Flows == 0:
			refused = append(refused, d)
			continue
		case d.Name == "":
			unnamed = append(unnamed, d)
			continue
		}
		if p, ok := presetFor(o.Presets, d.Name); ok {
			add("preset "+p.Name, p.Name, d).preset = p.Name
			continue
		}
		dom, err := publicsuffix.EffectiveTLDPlusOne(d.Name)
		if err != nil {
			dom = d.Name // a single label, a public suffix itself
		}
		add("domain "+dom, dom, d)
	}
	slices.SortFunc(order, func(a, b string) int { // presets first, then domains by name
		pa, pb := strings.HasPrefix(a, "preset "), strings.HasPrefix(b, "preset ")
		if pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	fmt.Fprintf(w, "# Proposed by `router learn`%s: %d caged flows to %d destinations", from(o.Source), s.Records, len(s.Dest))
	if !s.First.IsZero() {
		fmt.Fprintf(w, ",\n# %s to %s", s.First.UTC().Format("2006-01-02 15:04"), s.Last.UTC().Format("2006-01-02 15:04 MST"))
	}
	fmt.Fprint(w, `.
# Review it before use: each rule lets caged traffic reach the names it lists (by name only)
# through the proxy. Put these rules in place of the rule that proxied every caged flow while
# you learned; a caged flow no rule allows is then refused.
`)
	for _, key := range order {
		g := groups[key]
		slices.Sort(g.seen)
		g.seen = slices.Compact(g.seen)
		if g.preset == "" {
			g.hosts = g.seen
			if len(g.seen) > collapse {
				g.hosts = []string{"*." + g.title}
				if slices.Contains(g.seen, g.title) {
					g.hosts = append([]string{g.title}, g.hosts...)
				}
			}
		}
		fmt.Fprintf(w, "\n# %s: %s; %d flows, %s\n", g.title, summarize(g.seen, 4), g.flows, size(g.bytes))
		fmt.Fprintf(w, "[[rule]]\nname = %q\ncaged = true\n", "learned "+g.title)
		if g.preset != "" {
			fmt.Fprintf(w, "hosts_preset = [%q]\n", g.preset)
		} else {
			fmt.Fprintf(w, "hosts = [%s]\n", quoted(g.hosts))
		}
		if len(g.ports) <= maxPorts {
			ps := make([]string, 0, len(g.ports))
			for _, p := range sortedPorts(g.ports) {
				ps = append(ps, strconv.Itoa(int(p)))
			}
			fmt.Fprintf(w, "ports = [%s]\n", quoted(ps))
		} else {
			fmt.Fprintf(w, "# (seen on %d ports: no ports key)\n", len(g.ports))
		}
		fmt.Fprintf(w, "action = \"proxy\"\nproxy = %q\n", proxy)
	}
	if len(unnamed) > 0 {
		fmt.Fprint(w, "\n# Seen without a name (an allow-list by name refuses these; add an address to a rule's\n# hosts only if you must, knowing that other sites may share it):\n")
		for _, d := range unnamed {
			fmt.Fprintf(w, "#   %s port %s: %d flows, %s\n", d.Addr, portsText(d), d.Flows, size(d.Up+d.Down))
		}
	}
	if len(refused) > 0 {
		fmt.Fprint(w, "\n# Refused while learning (not proposed):\n")
		for _, d := range refused {
			fmt.Fprintf(w, "#   %s port %s: %d flows (%s)\n", d.key(), portsText(d), d.Refused, reasons(d.Reasons))
		}
	}
	if s.BadName > 0 {
		fmt.Fprintf(w, "\n# %d flows named something that is no plain host name: left out.\n", s.BadName)
	}
	return nil
}

func (s *Session) topProxy() string {
	n := map[string]int{}
	for _, d := range s.Dest {
		for p, c := range d.Proxies {
			n[p] += c
		}
	}
	best, most := "", 0
	for p, c := range n {
		if c > most || c == most && p < best {
			best, most = p, c
		}
	}
	return best
}

func presetFor(ps []Preset, name string) (Preset, bool) {
	for _, p := range ps {
		if p.covers(name) {
			return p, true
		}
	}
	return Preset{}, false
}

// validKey reports whether a proxy's name is safe inside a TOML basic string as %q writes
// it: printable ASCII without quotes or backslashes.
func validKey(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\' {
			return false
		}
	}
	return s != ""
}

func from(src string) string {
	if src == "" || !validKey(src) {
		return ""
	}
	return " from " + src
}

func quoted(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return strings.Join(q, ", ")
}

func summarize(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more", len(names)-n)
}

func sortedPorts(m map[uint16]bool) []uint16 {
	ps := make([]uint16, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

func portsText(d *Destination) string { return cmp.Or(d.PortsText(), "?") }

func reasons(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if !validKey(k) {
			k = "?"
		}
		keys[i] = k
	}
	return strings.Join(keys, ", ")
}

// size prints n bytes for a person.
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
