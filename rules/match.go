package rules

import (
	"net/netip"
	"strings"
)

// flow is a Query normalized once for matching: addresses unmapped, names lower-case without
// a trailing dot, paths lower-case with forward slashes. Building it allocates only when the
// query holds upper-case or backslashed text.
type flow struct {
	network  Network
	src, dst netip.Addr
	port     uint16
	host     string
	app      string // lower-case image name (base name of the path when only that is known)
	comm     string // lower-case command name, when it differs from app
	path     string // lower-case full path with '/' separators
	services []string
	caged    bool
}

func newFlow(q *Query) flow {
	f := flow{
		network:  q.Network,
		src:      q.Src.Unmap(),
		dst:      q.Dst.Unmap(),
		port:     q.Port,
		host:     normalizeName(q.Host),
		path:     normalizePath(q.AppPath),
		services: q.Services,
		caged:    q.Caged,
	}
	f.app = lower(q.App)
	if f.app == "" && f.path != "" {
		f.app = BaseName(f.path)
	}
	if c := lower(q.Comm); c != f.app {
		f.comm = c
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
			if f.host != "" && f.host == h.Name {
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
	if f.app == "" && f.path == "" && f.comm == "" {
		return false
	}
	for i := range as {
		if as[i].match(f.app, f.path) || f.comm != "" && as[i].match(f.comm, "") {
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

// hasLabelSuffix reports whether name is a strict subdomain of suffix: "a.b.example.com" and
// "b.example.com" have the suffix "example.com"; "example.com" itself does not, nor does
// "badexample.com".
func hasLabelSuffix(name, suffix string) bool {
	return len(name) > len(suffix) && name[len(name)-len(suffix)-1] == '.' && strings.HasSuffix(name, suffix)
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

// normalizeName lower-cases a host name and drops one trailing dot.
func normalizeName(s string) string {
	s = strings.TrimSuffix(s, ".")
	return lower(s)
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

// globMatch reports whether s matches pattern, where '*' matches any run of characters
// (separators included) and '?' any one byte. Both are already normalized.
func globMatch(pattern, s string) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[n]):
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
