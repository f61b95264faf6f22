package dns

import (
	"net/netip"
	"strings"
)

// IsIPLiteral reports whether name, a domain name in presentation form (a DNS question name,
// a SOCKS5 domain, a rule's host; case-insensitive, trailing dot optional, \DDD and \X
// escapes decoded), is something that a resolver library or a proxy would take for an IP
// address instead of a name to look up. Such a name must never stand for a fake IP: a
// connection to that fake IP would hand the proxy the "name", and a proxy on the host
// (ssh -D, tor, sing-box on 127.0.0.1) would connect to the address it spells, the host's
// loopback included.
//
// It is true when any of these forms, after the escapes are decoded, parses as an address:
//
//   - the whole name, or the name with brackets removed, as netip.ParseAddr does: dotted
//     IPv4 ("127.0.0.1"), IPv6 ("::1", "::ffff:127.0.0.1"), with a zone ("fe80::1%eth0");
//   - the last label is all decimal digits, or "0x" followed by hex digits: the WHATWG URL
//     host parser then parses the whole host as IPv4 (or fails), and inet_aton(3) and
//     Windows' inet_addr accept the classic shorter and mixed-radix forms that all end this
//     way: "127.1", "0x7f.1", "2130706433", "0177.0.0.1", "0x7f000001". No top-level domain
//     starts with a digit, so no real name is lost;
//   - a name strictly below ipv6-literal.net, which Windows' getaddrinfo turns into an IPv6
//     address without asking DNS ("0--1.ipv6-literal.net" is ::1);
//   - the part before the first ASCII white space or NUL byte of any of the above: C
//     libraries stop reading there (glibc's inet_aton accepts "127.0.0.1 x").
//
// Trailing empty labels are ignored. The empty name (the root) is not a literal.
func IsIPLiteral(name string) bool {
	s := strings.ToLower(unescapeName(name))
	if cut := strings.IndexAny(s, " \t\n\v\f\r\x00"); cut >= 0 {
		if literalForm(s[:cut]) {
			return true
		}
	}
	return literalForm(s)
}

// literalForm applies IsIPLiteral's tests to a decoded, lower-case name.
func literalForm(s string) bool {
	if parsesAsAddr(s) {
		return true
	}
	s = strings.TrimRight(s, ".")
	if s == "" {
		return false
	}
	if parsesAsAddr(s) {
		return true
	}
	if strings.HasSuffix(s, ".ipv6-literal.net") {
		return true
	}
	last := s[strings.LastIndexByte(s, '.')+1:]
	return isNumberLabel(last)
}

// parsesAsAddr reports whether s, or s without enclosing brackets, is an address to
// netip.ParseAddr.
func parsesAsAddr(s string) bool {
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}

// isNumberLabel reports whether l is all decimal digits, or "0x" followed by zero or more hex
// digits (the WHATWG "ends in a number" test; l is lower case).
func isNumberLabel(l string) bool {
	if l == "" {
		return false
	}
	digits, hex := l, false
	if strings.HasPrefix(l, "0x") {
		digits, hex = l[2:], true
	}
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		switch {
		case '0' <= c && c <= '9':
		case hex && 'a' <= c && c <= 'f':
		default:
			return false
		}
	}
	return true
}

// unescapeName decodes the presentation-form escapes of name: "\DDD" (a decimal byte value up
// to 255) and "\X" (X itself). A backslash that starts neither is kept as is. Escaped dots
// become plain dots, so a label holding dots reads as the several labels a program handling
// the name as text would see.
func unescapeName(name string) string {
	if strings.IndexByte(name, '\\') < 0 {
		return name
	}
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '\\' || i+1 >= len(name) {
			b.WriteByte(c)
			continue
		}
		if i+3 < len(name) && isDigit(name[i+1]) && isDigit(name[i+2]) && isDigit(name[i+3]) {
			v := int(name[i+1]-'0')*100 + int(name[i+2]-'0')*10 + int(name[i+3]-'0')
			if v <= 255 {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(name[i+1])
		i++
	}
	return b.String()
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
