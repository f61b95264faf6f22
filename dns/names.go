package dns

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	mdns "github.com/miekg/dns"
)

// canonical turns a question name in miekg's presentation format ("WWW.Example.com.") into
// the form the rest of the router uses: lower case, no trailing dot ("www.example.com").
// The root name becomes "".
func canonical(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// isHostname reports whether name (canonical form) can be handed to a SOCKS5 proxy as an
// ATYP domain: one or more labels of letters, digits, '-' and '_' (RFC 952/1123 plus the
// underscore that service names use), at most 253 characters. Names with escaped or
// non-ASCII bytes are not host names.
func isHostname(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	label := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
			continue
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
		label++
		if label > 63 {
			return false
		}
	}
	return label > 0
}

// underOrAt reports whether name is zone or a name under it (both canonical).
func underOrAt(name, zone string) bool {
	return name == zone || strings.HasSuffix(name, "."+zone)
}

// nameSet matches canonical names against exact names and "*.suffix" patterns. A pattern
// "*.example" matches every name strictly below "example" ("a.example", "a.b.example"), not
// "example" itself; list "example" as well to cover it. It is immutable after newNameSet and
// safe for concurrent use.
type nameSet struct {
	exact    map[string]struct{}
	suffixes []string // each with a leading dot: ".example"
}

// newNameSet validates and compiles patterns. Matching is case-insensitive; a trailing dot
// is ignored.
func newNameSet(patterns []string) (nameSet, error) {
	s := nameSet{exact: make(map[string]struct{})}
	for _, p := range patterns {
		c := canonical(strings.TrimSpace(p))
		wild := strings.HasPrefix(c, "*.")
		base := strings.TrimPrefix(c, "*.")
		if base == "" || strings.Contains(base, "*") || !isHostname(base) {
			return nameSet{}, fmt.Errorf("direct name %q: want a host name or *.suffix", p)
		}
		if wild {
			s.suffixes = append(s.suffixes, "."+base)
		} else {
			s.exact[base] = struct{}{}
		}
	}
	return s, nil
}

func (s nameSet) empty() bool { return len(s.exact) == 0 && len(s.suffixes) == 0 }

func (s nameSet) match(name string) bool {
	if _, ok := s.exact[name]; ok {
		return true
	}
	for _, suf := range s.suffixes {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	return false
}

// localRanges returns the address ranges whose reverse zones are answered locally with
// NXDOMAIN (RFC 6303 locally served zones, plus RFC 6598 shared space): asking a public
// resolver through the proxy about them is pointless and tells it about the local network.
func localRanges() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("100.64.0.0/10"),
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.0.2.0/24"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("198.51.100.0/24"),
		netip.MustParsePrefix("203.0.113.0/24"),
		netip.MustParsePrefix("255.255.255.255/32"),
		netip.MustParsePrefix("::/128"),
		netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("fc00::/7"),
		netip.MustParsePrefix("fe80::/10"),
		netip.MustParsePrefix("2001:db8::/32"),
	}
}

// within reports whether every address of p is inside r.
func within(p, r netip.Prefix) bool {
	return p.Addr().Is4() == r.Addr().Is4() && r.Bits() <= p.Bits() && r.Contains(p.Addr())
}

// reversePrefix parses a canonical name under in-addr.arpa or ip6.arpa into the prefix it
// names: "4.3.2.1.in-addr.arpa" is 1.2.3.4/32, "168.192.in-addr.arpa" is 192.168.0.0/16,
// a full ip6.arpa name of 32 nibbles is a /128. ok is false for any other name.
func reversePrefix(name string) (p netip.Prefix, ok bool) {
	switch {
	case underOrAt(name, "in-addr.arpa"):
		rest := strings.TrimSuffix(strings.TrimSuffix(name, "in-addr.arpa"), ".")
		var b [4]byte
		n := 0
		if rest != "" {
			labels := strings.Split(rest, ".")
			if len(labels) > 4 {
				return netip.Prefix{}, false
			}
			for i, l := range labels {
				v, err := strconv.ParseUint(l, 10, 8)
				if err != nil || (len(l) > 1 && l[0] == '0') {
					return netip.Prefix{}, false
				}
				b[len(labels)-1-i] = byte(v)
			}
			n = len(labels)
		}
		return netip.PrefixFrom(netip.AddrFrom4(b), 8*n), true
	case underOrAt(name, "ip6.arpa"):
		rest := strings.TrimSuffix(strings.TrimSuffix(name, "ip6.arpa"), ".")
		var b [16]byte
		n := 0
		if rest != "" {
			labels := strings.Split(rest, ".")
			if len(labels) > 32 {
				return netip.Prefix{}, false
			}
			for i, l := range labels {
				v, err := strconv.ParseUint(l, 16, 8)
				if err != nil || len(l) != 1 {
					return netip.Prefix{}, false
				}
				nib := len(labels) - 1 - i // nibble index from the most significant
				if nib%2 == 0 {
					b[nib/2] |= byte(v) << 4
				} else {
					b[nib/2] |= byte(v)
				}
			}
			n = len(labels)
		}
		return netip.PrefixFrom(netip.AddrFrom16(b), 4*n), true
	}
	return netip.Prefix{}, false
}

// reverseName is the PTR owner name of a, e.g. "4.3.2.1.in-addr.arpa.".
func reverseName(a netip.Addr) string {
	s, err := mdns.ReverseAddr(a.String())
	if err != nil { // cannot happen for a valid netip.Addr
		return "invalid."
	}
	return s
}
