package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/agentcage/router/internal/netaddr"
)

// IPRange is an inclusive range of addresses of one family; a CIDR or a single address is a
// range too. Addresses are never IPv4-mapped IPv6 and carry no zone.
type IPRange struct {
	Lo, Hi netip.Addr
}

// Contains reports whether a (already unmapped) lies in the range.
func (r IPRange) Contains(a netip.Addr) bool {
	return a.Is4() == r.Lo.Is4() && r.Lo.Compare(a) <= 0 && a.Compare(r.Hi) <= 0
}

// String prints the range as a single address, a CIDR when it is exactly one, or lo-hi.
func (r IPRange) String() string {
	if r.Lo == r.Hi {
		return r.Lo.String()
	}
	if p, ok := r.Prefix(); ok {
		return p.String()
	}
	return r.Lo.String() + "-" + r.Hi.String()
}

// Prefix returns the CIDR equal to the range, if there is one.
func (r IPRange) Prefix() (netip.Prefix, bool) { return netaddr.RangePrefix(r.Lo, r.Hi) }

// RangeOfPrefix turns a CIDR into the range of its addresses.
func RangeOfPrefix(p netip.Prefix) IPRange {
	a, bits := p.Addr(), p.Bits()
	if a.Is4In6() && bits >= 96 {
		a, bits = a.Unmap(), bits-96
	}
	p = netip.PrefixFrom(a.WithZone(""), bits).Masked()
	return IPRange{Lo: p.Addr(), Hi: netaddr.LastAddr(p)}
}

// ParseIPRange parses an address ("10.0.2.2", "::1"), a CIDR ("10.0.2.0/24") or a range of
// one family ("10.0.0.1-10.0.0.9"). A CIDR with host bits set is an error that suggests the
// network, since it is usually a typo.
func ParseIPRange(s string) (IPRange, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return IPRange{}, errors.New("empty address")
	}
	if lo, hi, ok := strings.Cut(s, "-"); ok && !strings.Contains(s, "/") {
		a, err := parseAddr(lo)
		if err != nil {
			return IPRange{}, fmt.Errorf("range %q: %w", s, err)
		}
		b, err := parseAddr(hi)
		if err != nil {
			return IPRange{}, fmt.Errorf("range %q: %w", s, err)
		}
		if a.Is4() != b.Is4() {
			return IPRange{}, fmt.Errorf("range %q mixes IPv4 and IPv6", s)
		}
		if b.Less(a) {
			return IPRange{}, fmt.Errorf("range %q ends before it starts", s)
		}
		return IPRange{Lo: a, Hi: b}, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return IPRange{}, fmt.Errorf("%q is not a valid CIDR", s)
		}
		if p.Addr().Zone() != "" {
			return IPRange{}, fmt.Errorf("%q: zones are not supported", s)
		}
		if m := p.Masked(); m != p {
			return IPRange{}, fmt.Errorf("%q has host bits set; did you mean %s?", s, m)
		}
		return RangeOfPrefix(p), nil
	}
	a, err := parseAddr(s)
	if err != nil {
		return IPRange{}, err
	}
	return IPRange{Lo: a, Hi: a}, nil
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not a valid IP address", strings.TrimSpace(s))
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q: zones are not supported", s)
	}
	return a.Unmap(), nil
}

// HostKind says how a Host entry matches.
type HostKind uint8

const (
	HostRange  HostKind = iota // the destination address lies in Range
	HostName                   // the destination's name equals Name
	HostSuffix                 // the destination's name is a subdomain of Name ("*.Name")
)

// Host is one entry of a rule's hosts field.
type Host struct {
	Kind  HostKind
	Range IPRange // HostRange
	Name  string  // HostName, HostSuffix: lower case, no trailing dot, no "*."
}

func (h Host) String() string {
	switch h.Kind {
	case HostName:
		return h.Name
	case HostSuffix:
		return "*." + h.Name
	}
	return h.Range.String()
}

// ParseHost parses an address, CIDR, range, exact host name or "*.suffix". A name matches only
// when the flow's name is known (fake IP, DNS, explain); "*.example.com" matches subdomains of
// example.com but not example.com itself.
func ParseHost(s string) (Host, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Host{}, errors.New("empty host")
	}
	if looksNumeric(s) {
		r, err := ParseIPRange(s)
		if err != nil {
			return Host{}, err
		}
		return Host{Kind: HostRange, Range: r}, nil
	}
	kind := HostName
	name := s
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		kind, name = HostSuffix, rest
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if err := checkHostName(name); err != nil {
		return Host{}, fmt.Errorf("%q: %w", s, err)
	}
	return Host{Kind: kind, Name: name}, nil
}

// looksNumeric tells addresses, CIDRs and ranges from names: anything with a colon, and
// anything made only of digits, dots, slashes and dashes, is meant as an address.
func looksNumeric(s string) bool {
	if strings.Contains(s, ":") {
		return true
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c == '.' || c == '/' || c == '-') {
			return false
		}
	}
	return true
}

func checkHostName(name string) error {
	if name == "" || name == "*" {
		return errors.New("a lone wildcard matches every name: leave hosts out instead")
	}
	if len(name) > 253 {
		return errors.New("name longer than 253 bytes")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" {
			return errors.New("empty label in name")
		}
		if len(label) > 63 {
			return errors.New("label longer than 63 bytes")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			case c == '*':
				return errors.New("wildcards are only allowed as a leading \"*.\"; use a CIDR or range for addresses")
			default:
				return fmt.Errorf("invalid character %q in name", c)
			}
		}
	}
	return nil
}

// PortRange is an inclusive range of ports; a single port has Lo == Hi.
type PortRange struct {
	Lo, Hi uint16
}

func (p PortRange) String() string {
	if p.Lo == p.Hi {
		return strconv.Itoa(int(p.Lo))
	}
	return strconv.Itoa(int(p.Lo)) + "-" + strconv.Itoa(int(p.Hi))
}

// ParsePorts parses "443" or "8000-9000". Port 0 is not a port.
func ParsePorts(s string) (PortRange, error) {
	s = strings.TrimSpace(s)
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := parsePort(lo)
	if err != nil {
		return PortRange{}, err
	}
	if !isRange {
		return PortRange{a, a}, nil
	}
	b, err := parsePort(hi)
	if err != nil {
		return PortRange{}, err
	}
	if b < a {
		return PortRange{}, fmt.Errorf("port range %q ends before it starts", s)
	}
	return PortRange{a, b}, nil
}

func parsePort(s string) (uint16, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > 65535 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", s)
	}
	if n == 0 {
		return 0, errors.New("port 0 is not a port (1-65535)")
	}
	return uint16(n), nil
}

// App is one entry of a rule's apps field: a case-insensitive glob ('*' any run, '?' one
// character) on the image name, or on the full path when the pattern holds a '/' or '\'.
type App struct {
	Text    string // as written
	pattern string // lower case, '/' separators
	path    bool   // matches the full path rather than the image name
	literal bool   // no wildcard
}

func (a App) String() string { return a.Text }

// IsPath reports whether the pattern is matched against the full path.
func (a App) IsPath() bool { return a.path }

// Pattern returns the normalized pattern (lower case, '/' separators).
func (a App) Pattern() string { return a.pattern }

// IsLiteral reports whether the pattern has no wildcard.
func (a App) IsLiteral() bool { return a.literal }

// ParseApp parses an apps entry.
func ParseApp(s string) (App, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return App{}, errors.New("empty app pattern")
	}
	if strings.ContainsRune(t, 0) {
		return App{}, errors.New("app pattern holds a NUL byte")
	}
	p := normalizePath(t)
	a := App{Text: t, pattern: p, path: strings.Contains(p, "/"), literal: !strings.ContainsAny(p, "*?")}
	if a.path && strings.HasSuffix(p, "/") {
		return App{}, fmt.Errorf("app pattern %q ends with a separator; add \"*\" to match what is inside", t)
	}
	return a, nil
}

// MustApp is ParseApp for tests and literals known to be valid; it panics on error.
func MustApp(s string) App {
	a, err := ParseApp(s)
	if err != nil {
		panic(err)
	}
	return a
}

// match tests a flow's image name and path (see flow: folded as they are read).
func (a *App) match(name, path string) bool {
	if a.path {
		if path == "" {
			return false
		}
		if a.literal {
			return equalFolded(path, a.pattern, true)
		}
		return globMatch(a.pattern, path, true)
	}
	if a.literal {
		return equalFolded(name, a.pattern, false)
	}
	return globMatch(a.pattern, name, false)
}

// ParseService parses a services entry: a Windows service name, compared case-insensitively.
func ParseService(s string) (string, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return "", errors.New("empty service name")
	}
	if strings.ContainsAny(t, "/\\*?") {
		return "", fmt.Errorf("service name %q holds a character service names cannot have", t)
	}
	return strings.ToLower(t), nil
}
