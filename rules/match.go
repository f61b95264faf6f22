package rules

import (
	"net/netip"
	"strings"
)

// flow is a Query prepared once for matching: addresses unmapped, a name without its
// trailing dot. Its text keeps the query's case (and a path its '\' separators) when the
// text is ASCII, so that preparing a flow allocates nothing; the flow's text stands for its
// folded form (lowerByte, pathByte on a path), and every comparison folds the flow's side
// as it reads it, against rule entries that Parse normalized. Text with a byte >= 0x80 is
// lower-cased here, once (strings.ToLower: Unicode case does not fold byte by byte); it is
// then its own folded form.
type flow struct {
	network  Network
	src, dst netip.Addr
	port     uint16
	host     string // folds to the lower-case name
	app      string // folds to the lower-case image name (the path's base name when only that is known)
	path     string // folds (pathByte) to the lower-case full path with '/' separators
	services []string
	caged    bool
}

func newFlow(q *Query) flow {
	f := flow{
		network:  q.Network,
		src:      q.Src.Unmap(),
		dst:      q.Dst.Unmap(),
		port:     q.Port,
		host:     foldable(strings.TrimSuffix(q.Host, ".")),
		path:     foldable(q.AppPath),
		services: q.Services,
		caged:    q.Caged,
	}
	f.app = foldable(q.App)
	if f.app == "" && f.path != "" {
		f.app = BaseName(f.path)
	}
	return f
}

func (r *Rule) mismatch(f *flow) string {
	if r.Disabled {
		return FieldEnabled
	}
	if r.Network != AnyNetwork && r.Network != f.network {
		return FieldNetwork
	}
	if len(r.Sources) > 0 && !matchRanges(r.Sources, f.src) {
		return FieldSources
	}
	if len(r.Hosts) > 0 && !matchHosts(r.Hosts, f) {
		return FieldHosts
	}
	if len(r.Ports) > 0 && !matchPorts(r.Ports, f.port) {
		return FieldPorts
	}
	if len(r.Apps) > 0 && !matchApps(r.Apps, f) {
		return FieldApps
	}
	if len(r.Services) > 0 && !matchServices(r.Services, f.services) {
		return FieldServices
	}
	if r.Caged && !f.caged {
		return FieldCaged
	}
	return ""
}

func matchRanges(rs []IPRange, a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	for _, r := range rs {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

func matchHosts(hs []Host, f *flow) bool {
	for i := range hs {
		h := &hs[i]
		switch h.Kind {
		case HostRange:
			if f.dst.IsValid() && h.Range.Contains(f.dst) {
				return true
			}
		case HostName:
			if f.host != "" && equalFolded(f.host, h.Name, false) {
				return true
			}
		case HostSuffix:
			if f.host != "" && hasLabelSuffix(f.host, h.Name) {
				return true
			}
		}
	}
	return false
}

func matchPorts(ps []PortRange, p uint16) bool {
	for _, r := range ps {
		if r.Lo <= p && p <= r.Hi {
			return true
		}
	}
	return false
}

func matchApps(as []App, f *flow) bool {
	if f.app == "" && f.path == "" {
		return false
	}
	for i := range as {
		if as[i].match(f.app, f.path) {
			return true
		}
	}
	return false
}

func matchServices(want, have []string) bool {
	for _, h := range have {
		for _, w := range want {
			if strings.EqualFold(h, w) {
				return true
			}
		}
	}
	return false
}

// hasLabelSuffix reports whether a flow's name is a strict subdomain of a normalized suffix:
// "a.b.example.com" and "b.example.com" have the suffix "example.com"; "example.com" itself
// does not, nor does "badexample.com".
func hasLabelSuffix(name, suffix string) bool {
	return len(name) > len(suffix) && name[len(name)-len(suffix)-1] == '.' && equalFolded(name[len(name)-len(suffix):], suffix, false)
}

// lowerByte folds one byte of a flow's text: ASCII upper case to lower case.
func lowerByte(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		c += 'a' - 'A'
	}
	return c
}

// pathByte folds one byte of a flow's path: lowerByte, and '\\' to '/'.
func pathByte(c byte) byte {
	if c == '\\' {
		return '/'
	}
	return lowerByte(c)
}

// foldByte folds one byte of a flow's text: pathByte when path, else lowerByte.
func foldByte(c byte, path bool) byte {
	if path {
		return pathByte(c)
	}
	return lowerByte(c)
}

// equalFolded reports whether a flow's text s folds (foldByte: pathByte when path, else
// lowerByte) to the normalized t.
func equalFolded(s, t string, path bool) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if foldByte(s[i], path) != t[i] {
			return false
		}
	}
	return true
}

// isASCII reports whether s has no byte >= 0x80.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// foldable returns s as a flow keeps it: as it is when ASCII, else lower-cased.
func foldable(s string) string {
	if isASCII(s) {
		return s
	}
	return strings.ToLower(s)
}

// lower returns s in lower case, without allocating when it already is.
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 0x80 {
			return strings.ToLower(s)
		}
	}
	return s
}

// normalizePath lower-cases a path and turns backslashes into slashes, so that Windows and
// Unix paths compare alike.
func normalizePath(s string) string {
	s = lower(s)
	if strings.IndexByte(s, '\\') >= 0 {
		s = strings.ReplaceAll(s, "\\", "/")
	}
	return s
}

// BaseName is the file name of a path, Windows ('\\') or Unix ('/') separated.
func BaseName(path string) string {
	if i := strings.LastIndexAny(path, `\/`); i >= 0 {
		return path[i+1:]
	}
	return path
}

// globMatch reports whether a flow's text s matches the normalized pattern, where '*'
// matches any run of characters (separators included) and '?' any one byte; s is folded
// as it is read (pathByte when path, else lowerByte).
func globMatch(pattern, s string, path bool) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(s) {
		c := foldByte(s[n], path)
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == c):
			p++
			n++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
