package dns

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func TestIsIPLiteral(t *testing.T) {
	for _, tt := range []struct {
		name string
		want bool
	}{
		// What resolver libraries and proxies take for IPv4.
		{"127.0.0.1", true},
		{"127.0.0.1.", true},
		{"127.1", true},
		{"127.0.1", true},
		{"0x7f.1", true},
		{"0X7F.0.0.1", true},
		{"2130706433", true},
		{"0177.0.0.1", true},
		{"0x7f000001", true},
		{"017700000001", true},
		{"1.0x7f", true},
		{"10.0.2.2", true},
		{"0", true},
		{"0x", true},
		{"1.2.3.4.5", true},    // WHATWG: ends in a number, so an IPv4 parse (that fails)
		{"foo.123", true},      // idem; no top-level domain is numeric
		{"example.0x1f", true}, // idem, hex
		{"999.999.999.999", true},
		{"127.0.0.1..", true},
		{`127\.0\.0\.1.`, true},              // one label holding dots reads as four
		{`\049\050\055.0.0.1`, true},         // \DDD escapes of "127"
		{`127.0.0.1\032evil.`, true},         // inet_aton stops at white space
		{`127.0.0.1\000.evil.example`, true}, // C stops at NUL
		{"127.0.0.1 evil", true},
		// IPv6, as names.
		{"::1", true},
		{"::ffff:127.0.0.1", true},
		{"[::1]", true},
		{"fe80::1%eth0", true},
		{"0--1.ipv6-literal.net", true},
		{"fe80--1s4.IPV6-LITERAL.NET.", true},
		// Names.
		{"", false},
		{".", false},
		{"example.com", false},
		{"localhost", false},
		{"1.0.0.127.in-addr.arpa", false},
		{"1.2.3.4.nip.io", false}, // a real name (that resolves to its address: the router's business)
		{"0x7f.example", false},
		{"127.0.0.1x", false},
		{"1e3", false},
		{"0o17", false},
		{"0xg", false},
		{"123a", false},
		{"ipv6-literal.net", false},
		{"a.b-1", false},
		{"xn--80ak6aa92e.com", false},
		{`127\`, false},
		{"[::1", false},
	} {
		if got := IsIPLiteral(tt.name); got != tt.want {
			t.Errorf("IsIPLiteral(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// inetAton is a slow transcription of the classic BSD/glibc inet_aton(3): one to four parts
// separated by dots, each decimal, octal (leading 0) or hex (leading 0x, digits optional),
// the last part filling the remaining bytes, the string ending or followed by white space.
func inetAton(s string) bool {
	var parts []uint64
	i := 0
	for {
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		base, val := uint64(10), uint64(0)
		if s[i] == '0' {
			i++
			base = 8
			if i < len(s) && (s[i] == 'x' || s[i] == 'X') {
				base = 16
				i++
			}
		}
		for ; i < len(s); i++ {
			c := s[i]
			var d uint64
			switch {
			case isDigit(c):
				if base == 8 && c >= '8' {
					return false
				}
				d = uint64(c - '0')
			case base == 16 && 'a' <= c && c <= 'f':
				d = uint64(c-'a') + 10
			case base == 16 && 'A' <= c && c <= 'F':
				d = uint64(c-'A') + 10
			default:
				goto end
			}
			val = val*base + d
			if val > 0xffffffff {
				return false
			}
		}
	end:
		parts = append(parts, val)
		if i < len(s) && s[i] == '.' {
			if len(parts) == 4 {
				return false
			}
			i++
			continue
		}
		break
	}
	if i < len(s) && !strings.ContainsRune(" \t\n\v\f\r", rune(s[i])) {
		return false
	}
	limit := []uint64{0, 0xffffffff, 0xffffff, 0xffff, 0xff}[len(parts)]
	for _, p := range parts[:len(parts)-1] {
		if p > 0xff {
			return false
		}
	}
	return parts[len(parts)-1] <= limit
}

func TestInetAtonOracle(t *testing.T) {
	for s, want := range map[string]bool{
		"127.0.0.1": true, "127.1": true, "0x7f.1": true, "2130706433": true, "0177.0.0.1": true,
		"1.2.3.4.5": false, "256.1": false, "08": false, "127.0.0.1 x": true, "127.0.0.1x": false,
		"": false, "a": false, "1..2": false, "0x": true,
	} {
		if got := inetAton(s); got != want {
			t.Errorf("inetAton(%q) = %v, want %v", s, got, want)
		}
	}
}

// checkLiteral checks IsIPLiteral's properties on name.
func checkLiteral(t *testing.T, name string) {
	t.Helper()
	got := IsIPLiteral(name)
	if inetAton(name) && !got {
		t.Fatalf("IsIPLiteral(%q) = false, but inet_aton takes it for an address", name)
	}
	if _, err := netip.ParseAddr(name); err == nil && !got {
		t.Fatalf("IsIPLiteral(%q) = false, but netip.ParseAddr takes it for an address", name)
	}
	if flip := flipASCIICase(name); IsIPLiteral(flip) != got {
		t.Fatalf("IsIPLiteral(%q) = %v but IsIPLiteral(%q) = %v", name, got, flip, !got)
	}
	// A trailing dot is the root label, except after a lone backslash (it is escaped then)
	// and in an IPv6 zone (netip takes "fe80::1%." for a zone named ".").
	if !strings.HasSuffix(name, `\`) && !strings.Contains(name, "%") && IsIPLiteral(name+".") != got {
		t.Fatalf("IsIPLiteral(%q) = %v, with a trailing dot %v", name, got, !got)
	}
	if got && isHostname(canonical(name)) {
		// A host name that is a literal must end in a number: nothing else can make it one.
		c := canonical(name)
		if !isNumberLabel(c[strings.LastIndexByte(c, '.')+1:]) && !strings.HasSuffix(c, ".ipv6-literal.net") {
			t.Fatalf("host name %q is a literal without a numeric last label", name)
		}
	}
}

func flipASCIICase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// TestIsIPLiteralRandom compares IsIPLiteral with the inet_aton oracle on random strings
// over the alphabet that matters.
func TestIsIPLiteralRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789abcdefxX.:- \\[]%"
	for range 200_000 {
		b := make([]byte, 1+rng.IntN(16))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		checkLiteral(t, string(b))
	}
}

// FuzzIsIPLiteral checks the literal detector on arbitrary names: no panic, never false for
// what inet_aton or netip.ParseAddr take for an address, independent of letter case and of a
// trailing dot, and a host name is a literal only by its last label.
func FuzzIsIPLiteral(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "127.1", "0x7f.1", "2130706433", "0177.0.0.1", "::1",
		"[::1]", "0--1.ipv6-literal.net", `\049\050\055.0.0.1`, "127.0.0.1 x", "example.com", "1.2.3.4.nip.io"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		checkLiteral(t, name)
	})
}
