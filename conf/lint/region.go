package lint

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/agentcage/router/rules"

	"github.com/agentcage/router/internal/netaddr"
)

// A box is the set of flows one rule matches, one factor per field. Shadowing is decided on
// boxes: a later rule is unreachable when subtracting the earlier boxes from its own leaves
// nothing. Fields whose complement has no exact form (apps, services, host names) only ever
// subtract when the earlier rule covers them whole; everywhere else the answer errs towards
// "still reachable", so lint never calls a reachable rule unreachable.
type box struct {
	net   []rules.Network // nil: tcp and udp
	src   *ivset          // nil: any source
	hosts *hostSet        // nil: any destination
	ports *ivset          // nil: any port
	apps  []rules.App     // nil: any process, known or not
	svcs  []string        // nil: any
	cage  cageSide        // which flows, caged or not
}

// cageSide is the caged dimension of a box: whether a flow is caged is treated as free of
// the other fields (a superset of the real flows, so a subtraction that covers it covers
// the real ones too).
type cageSide uint8

const (
	anyCage   cageSide = iota
	cagedOnly          // caged = true
	hostOnly           // a bare direct rule: this host's own flows only
)

func boxOf(r *rules.Rule) box {
	b := box{apps: r.Apps, svcs: r.Services}
	switch {
	case r.Caged:
		b.cage = cagedOnly
	case r.HostOnly():
		b.cage = hostOnly
	}
	if r.Network != rules.AnyNetwork {
		b.net = []rules.Network{r.Network}
	}
	if len(r.Sources) > 0 {
		b.src = ivsetOfRanges(r.Sources)
	}
	if len(r.Hosts) > 0 {
		b.hosts = hostSetOf(r.Hosts)
	}
	if len(r.Ports) > 0 {
		s := &ivset{}
		for _, p := range r.Ports {
			s.add(iv{netaddr.Key{Lo: uint64(p.Lo)}, netaddr.Key{Lo: uint64(p.Hi)}})
		}
		b.ports = s
	}
	return b
}

// succ and pred step along the address axis; the callers never step off its ends.
func succ(k netaddr.Key) netaddr.Key { n, _ := k.Next(); return n }
func pred(k netaddr.Key) netaddr.Key { p, _ := k.Prev(); return p }

// iv is an inclusive interval.
type iv struct{ lo, hi netaddr.Key }

// ivset is a union of disjoint intervals, sorted.
type ivset struct{ ivs []iv }

func ivsetOfRanges(rs []rules.IPRange) *ivset {
	s := &ivset{}
	for _, r := range rs {
		s.addRange(r)
	}
	return s
}

// mapped4 is the block of IPv4-mapped IPv6 addresses, ::ffff:0.0.0.0 to ::ffff:255.255.255.255:
// on the key axis, where the IPv4 addresses are.
var mapped4 = iv{netaddr.KeyOf(netip.IPv4Unspecified()), netaddr.KeyOf(netip.AddrFrom4([4]byte{255, 255, 255, 255}))}

// addRange adds the addresses r matches. An IPv6 range matches IPv6 addresses only (the
// rules compare families, and a flow's IPv4-mapped address is judged as IPv4), so the
// IPv4 block of the axis is cut out of it: ::/1 covers no IPv4 address.
func (s *ivset) addRange(r rules.IPRange) {
	lo, hi := netaddr.KeyOf(r.Lo), netaddr.KeyOf(r.Hi)
	if r.Lo.Is4() {
		s.add(iv{lo, hi})
		return
	}
	if lo.Less(mapped4.lo) {
		s.add(iv{lo, minKey(hi, pred(mapped4.lo))})
	}
	if mapped4.hi.Less(hi) {
		s.add(iv{maxKey(lo, succ(mapped4.hi)), hi})
	}
}

func minKey(a, b netaddr.Key) netaddr.Key {
	if b.Less(a) {
		return b
	}
	return a
}

func maxKey(a, b netaddr.Key) netaddr.Key {
	if a.Less(b) {
		return b
	}
	return a
}

func (s *ivset) add(x iv) {
	s.ivs = append(s.ivs, x)
	slices.SortFunc(s.ivs, func(a, b iv) int { return a.lo.Compare(b.lo) })
	out := s.ivs[:1]
	for _, y := range s.ivs[1:] {
		last := &out[len(out)-1]
		if y.lo.Compare(last.hi) <= 0 || last.hi.Compare(netaddr.Key{Hi: ^uint64(0), Lo: ^uint64(0)}) != 0 && y.lo == succ(last.hi) {
			if y.hi.Compare(last.hi) > 0 {
				last.hi = y.hi
			}
			continue
		}
		out = append(out, y)
	}
	s.ivs = out
}

func (s *ivset) empty() bool { return s == nil || len(s.ivs) == 0 }

func (s *ivset) intersect(t *ivset) *ivset {
	out := &ivset{}
	for _, a := range s.ivs {
		for _, b := range t.ivs {
			lo, hi := a.lo, a.hi
			if b.lo.Compare(lo) > 0 {
				lo = b.lo
			}
			if b.hi.Compare(hi) < 0 {
				hi = b.hi
			}
			if lo.Compare(hi) <= 0 {
				out.ivs = append(out.ivs, iv{lo, hi})
			}
		}
	}
	return out
}

// meets reports whether s and t share a point: intersect(t) is not empty, found without
// making it.
func (s *ivset) meets(t *ivset) bool {
	i, j := 0, 0
	for i < len(s.ivs) && j < len(t.ivs) {
		a, b := s.ivs[i], t.ivs[j]
		switch {
		case a.hi.Compare(b.lo) < 0:
			i++
		case b.hi.Compare(a.lo) < 0:
			j++
		default:
			return true
		}
	}
	return false
}

func (s *ivset) minus(t *ivset) *ivset {
	cur := slices.Clone(s.ivs)
	for _, b := range t.ivs {
		var next []iv
		for _, a := range cur {
			if b.hi.Compare(a.lo) < 0 || b.lo.Compare(a.hi) > 0 {
				next = append(next, a)
				continue
			}
			if a.lo.Compare(b.lo) < 0 {
				next = append(next, iv{a.lo, pred(b.lo)})
			}
			if a.hi.Compare(b.hi) > 0 {
				next = append(next, iv{succ(b.hi), a.hi})
			}
		}
		cur = next
	}
	return &ivset{ivs: cur}
}

func (s *ivset) contains(t *ivset) bool { return t.minus(s).empty() }

// full returns the whole axis of a field left open: every port, or every address.
func fullPorts() *ivset { return &ivset{ivs: []iv{{netaddr.Key{Lo: 1}, netaddr.Key{Lo: 65535}}}} }

func fullAddrs() *ivset {
	return &ivset{ivs: []iv{{netaddr.Key{}, netaddr.Key{Hi: ^uint64(0), Lo: ^uint64(0)}}}}
}

// hostSet is a hosts field: address ranges, exact names and suffixes.
type hostSet struct {
	addrs    *ivset
	names    []string
	suffixes []string
}

func hostSetOf(hs []rules.Host) *hostSet {
	s := &hostSet{addrs: &ivset{}}
	for _, h := range hs {
		switch h.Kind {
		case rules.HostRange:
			s.addrs.addRange(h.Range)
		case rules.HostName:
			s.names = append(s.names, h.Name)
		case rules.HostSuffix:
			s.suffixes = append(s.suffixes, h.Name)
		}
	}
	return s
}

func (s *hostSet) addrOnly() bool { return len(s.names) == 0 && len(s.suffixes) == 0 }

func (s *hostSet) coversName(n string) bool {
	if slices.Contains(s.names, n) {
		return true
	}
	for _, suf := range s.suffixes {
		if strings.HasSuffix(n, "."+suf) {
			return true
		}
	}
	return false
}

func (s *hostSet) coversSuffix(n string) bool {
	for _, suf := range s.suffixes {
		if n == suf || strings.HasSuffix(n, "."+suf) {
			return true
		}
	}
	return false
}

// contains reports whether every destination of t is in s.
func (s *hostSet) contains(t *hostSet) bool {
	if !s.addrs.contains(t.addrs) {
		return false
	}
	for _, n := range t.names {
		if !s.coversName(n) {
			return false
		}
	}
	for _, n := range t.suffixes {
		if !s.coversSuffix(n) {
			return false
		}
	}
	return true
}

// overlaps reports whether some destination is in both. Address entries and name entries are
// taken as different destinations: lint does not guess which names resolve to which
// addresses.
func (s *hostSet) overlaps(t *hostSet) bool {
	if s.addrs.meets(t.addrs) {
		return true
	}
	for _, n := range t.names {
		if s.coversName(n) {
			return true
		}
	}
	for _, n := range s.names {
		if t.coversName(n) {
			return true
		}
	}
	for _, a := range s.suffixes {
		for _, b := range t.suffixes {
			if a == b || strings.HasSuffix(a, "."+b) || strings.HasSuffix(b, "."+a) {
				return true
			}
		}
	}
	return false
}

// appCovers reports whether pattern a matches every process that pattern r matches.
func appCovers(a, r rules.App) bool {
	ap, rp := a.Pattern(), r.Pattern()
	if ap == "*" {
		return true
	}
	if a.IsPath() != r.IsPath() {
		return false
	}
	if r.IsLiteral() {
		return globMatch(ap, rp)
	}
	if ap == rp {
		return true
	}
	// "prefix*" covers any pattern that starts with the prefix; "*suffix" any that ends with it.
	if i := strings.IndexAny(ap, "*?"); i == len(ap)-1 && ap[i] == '*' {
		return strings.HasPrefix(rp, ap[:i]) && !strings.ContainsAny(rp[:i], "*?")
	}
	if strings.HasPrefix(ap, "*") && !strings.ContainsAny(ap[1:], "*?") {
		return strings.HasSuffix(rp, ap[1:]) && !strings.ContainsAny(rp[len(rp)-len(ap)+1:], "*?")
	}
	return false
}

// appOverlaps reports whether some process could match both patterns (erring to yes).
func appOverlaps(a, r rules.App) bool {
	if appCovers(a, r) || appCovers(r, a) {
		return true
	}
	if a.IsPath() != r.IsPath() {
		return true // a path pattern and a name pattern may name the same executable
	}
	ap, rp := a.Pattern(), r.Pattern()
	if a.IsLiteral() {
		return globMatch(rp, ap)
	}
	if r.IsLiteral() {
		return globMatch(ap, rp)
	}
	// Two globs: compatible literal prefixes and suffixes.
	pa, pr := literalPrefix(ap), literalPrefix(rp)
	if !strings.HasPrefix(pa, pr) && !strings.HasPrefix(pr, pa) {
		return false
	}
	sa, sr := literalSuffix(ap), literalSuffix(rp)
	return strings.HasSuffix(sa, sr) || strings.HasSuffix(sr, sa)
}

func literalPrefix(p string) string {
	if i := strings.IndexAny(p, "*?"); i >= 0 {
		return p[:i]
	}
	return p
}

func literalSuffix(p string) string {
	if i := strings.LastIndexAny(p, "*?"); i >= 0 {
		return p[i+1:]
	}
	return p
}

func globMatch(pattern, s string) bool {
	a, err := rules.ParseApp(pattern)
	if err != nil {
		return false
	}
	return (&rules.Rule{Apps: []rules.App{a}}).Match(&rules.Query{Owner: rules.Owner{App: s, AppPath: pathIf(a, s)}})
}

func pathIf(a rules.App, s string) string {
	if a.IsPath() {
		return s
	}
	return ""
}

func appsContain(a, r []rules.App) bool {
	if a == nil {
		return true
	}
	if r == nil {
		return false
	}
	for _, x := range r {
		if !slices.ContainsFunc(a, func(y rules.App) bool { return appCovers(y, x) }) {
			return false
		}
	}
	return true
}

func appsOverlap(a, r []rules.App) bool {
	if a == nil || r == nil {
		return true
	}
	for _, x := range a {
		for _, y := range r {
			if appOverlaps(x, y) {
				return true
			}
		}
	}
	return false
}

func svcsContain(a, r []string) bool {
	if a == nil {
		return true
	}
	if r == nil {
		return false
	}
	for _, s := range r {
		if !slices.Contains(a, s) {
			return false
		}
	}
	return true
}

func svcsOverlap(a, r []string) bool {
	if a == nil || r == nil {
		return true
	}
	return slices.ContainsFunc(a, func(s string) bool { return slices.Contains(r, s) })
}

func netsOf(n []rules.Network) []rules.Network {
	if n == nil {
		return []rules.Network{rules.TCP, rules.UDP}
	}
	return n
}

func (b box) overlaps(o box) bool {
	if b.cage != anyCage && o.cage != anyCage && b.cage != o.cage {
		return false
	}
	if !slices.ContainsFunc(netsOf(b.net), func(n rules.Network) bool { return slices.Contains(netsOf(o.net), n) }) {
		return false
	}
	if b.src != nil && o.src != nil && !b.src.meets(o.src) {
		return false
	}
	if b.hosts != nil && o.hosts != nil && !b.hosts.overlaps(o.hosts) {
		return false
	}
	if b.ports != nil && o.ports != nil && !b.ports.meets(o.ports) {
		return false
	}
	return appsOverlap(b.apps, o.apps) && svcsOverlap(b.svcs, o.svcs)
}

// destContains reports whether b takes every destination of o: network, hosts and ports.
func (b box) destContains(o box) bool {
	if b.net != nil && slices.ContainsFunc(netsOf(o.net), func(n rules.Network) bool { return !slices.Contains(b.net, n) }) {
		return false
	}
	if b.hosts != nil && (o.hosts == nil || !b.hosts.contains(o.hosts)) {
		return false
	}
	if b.ports != nil && (o.ports == nil || !b.ports.contains(o.ports)) {
		return false
	}
	return true
}

// canSubtract reports whether a may take anything from r or from what the subtraction of
// other boxes leaves of r: those pieces keep r's apps and services, and r's hosts (or, when
// r's hosts are address-only, parts of them), and minus takes nothing unless a covers the
// apps, the services and names whole. When it reports false, minus(a) leaves every piece
// as it is.
func canSubtract(a, r box) bool {
	if !appsContain(a.apps, r.apps) || !svcsContain(a.svcs, r.svcs) {
		return false
	}
	if a.hosts != nil && (r.hosts == nil || !r.hosts.addrOnly() && !a.hosts.contains(r.hosts)) {
		return false
	}
	return true
}

// minus returns r without a, as boxes; when the difference has no exact form it returns r
// unchanged (nothing is claimed to be covered).
func (r box) minus(a box) []box {
	if !r.overlaps(a) {
		return []box{r}
	}
	// The opaque fields must be covered whole, or nothing can be subtracted.
	if !appsContain(a.apps, r.apps) || !svcsContain(a.svcs, r.svcs) {
		return []box{r}
	}
	if a.hosts != nil && !(r.hosts != nil && a.hosts.contains(r.hosts)) {
		if r.hosts == nil || !r.hosts.addrOnly() || !a.hosts.addrOnly() {
			return []box{r}
		}
	}
	var out []box
	cur := r
	// caged or not
	if a.cage != anyCage && cur.cage == anyCage {
		piece := cur
		piece.cage = cagedOnly + hostOnly - a.cage // the other side
		out = append(out, piece)
		cur.cage = a.cage
	}
	// network
	if a.net != nil {
		rest := slices.DeleteFunc(slices.Clone(netsOf(cur.net)), func(n rules.Network) bool { return slices.Contains(a.net, n) })
		if len(rest) > 0 {
			piece := cur
			piece.net = rest
			out = append(out, piece)
		}
		cur.net = a.net
	}
	// sources
	if a.src != nil {
		rs := cur.src
		if rs == nil {
			rs = fullAddrs()
		}
		if rest := rs.minus(a.src); !rest.empty() {
			piece := cur
			piece.src = rest
			out = append(out, piece)
		}
		cur.src = rs.intersect(a.src)
	}
	// hosts (address-only here, or covered whole)
	if a.hosts != nil && !a.hosts.contains(cur.hosts) {
		if rest := cur.hosts.addrs.minus(a.hosts.addrs); !rest.empty() {
			piece := cur
			piece.hosts = &hostSet{addrs: rest}
			out = append(out, piece)
		}
		cur.hosts = &hostSet{addrs: cur.hosts.addrs.intersect(a.hosts.addrs)}
	}
	// ports
	if a.ports != nil {
		rp := cur.ports
		if rp == nil {
			rp = fullPorts()
		}
		if rest := rp.minus(a.ports); !rest.empty() {
			piece := cur
			piece.ports = rest
			out = append(out, piece)
		}
		cur.ports = rp.intersect(a.ports)
	}
	// What is left in cur lies inside a: covered.
	return out
}
