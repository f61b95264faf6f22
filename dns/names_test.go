package dns

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestReversePrefix(t *testing.T) {
	tests := []struct {
		name string
		want string // "" for not a reverse name
	}{
		{"4.3.2.1.in-addr.arpa", "1.2.3.4/32"},
		{"168.192.in-addr.arpa", "192.168.0.0/16"},
		{"10.in-addr.arpa", "10.0.0.0/8"},
		{"in-addr.arpa", "0.0.0.0/0"},
		{"0.0.0.0.in-addr.arpa", "0.0.0.0/32"},
		{"256.1.1.1.in-addr.arpa", ""},
		{"01.1.1.1.in-addr.arpa", ""},
		{"1.1.1.1.1.in-addr.arpa", ""},
		{"x.1.1.1.in-addr.arpa", ""},
		{"a.in-addr.arpa.example", ""},
		{"example.com", ""},
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa", "::1/128"},
		{"8.b.d.0.1.0.0.2.ip6.arpa", "2001:db8::/32"},
		{"c.f.ip6.arpa", "fc00::/8"},
		{"ip6.arpa", "::/0"},
		{"10.f.ip6.arpa", ""},
		{"g.f.ip6.arpa", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := reversePrefix(tt.name)
			if tt.want == "" {
				if ok {
					t.Errorf("reversePrefix = %v, true; want not a reverse name", got)
				}
				return
			}
			if want := netip.MustParsePrefix(tt.want); !ok || got != want {
				t.Errorf("reversePrefix = %v, %v; want %v, true", got, ok, want)
			}
		})
	}
	t.Run("round trip with reverseName", func(t *testing.T) {
		for _, a := range []string{"198.18.0.1", "10.0.2.2", "2001:db8::1", "fe80::1:2"} {
			addr := netip.MustParseAddr(a)
			got, ok := reversePrefix(strings.TrimSuffix(reverseName(addr), "."))
			if !ok || got != netip.PrefixFrom(addr, addr.BitLen()) {
				t.Errorf("%s: reversePrefix(reverseName) = %v, %v", a, got, ok)
			}
		}
	})
}

func TestIsHostname(t *testing.T) {
	for name, want := range map[string]bool{
		"example.com": true, "a": true, "_sip._tcp.example.com": true, "xn--caf-dma.example": true,
		"a-b.c": true, "": false, "a..b": false, ".a": false, "a.": false, `a\ b`: false,
		`caf\233`: false, "a*b": false, strings.Repeat("a", 64) + ".com": false,
		strings.Repeat("a", 63) + ".com": true, strings.Repeat("abcdefghi.", 26): false,
	} {
		if got := isHostname(name); got != want {
			t.Errorf("isHostname(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestNameSet(t *testing.T) {
	s, err := newNameSet([]string{"*.Local.", "myhost", "*.corp.example"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"printer.local": true, "a.b.local": true, "local": false, "mylocal": false,
		"myhost": true, "myhost.local": true, "x.myhost": false,
		"git.corp.example": true, "corp.example": false, "evilcorp.example": false,
	} {
		if got := s.match(name); got != want {
			t.Errorf("match(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestParseResolvConf(t *testing.T) {
	conf := `# generated
search lan
nameserver 192.168.1.1
nameserver 2001:db8::53 # comment
nameserver fe80::1%eth0
options edns0
nameserver ::ffff:10.0.0.1
`
	got, err := ParseResolvConf(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	var gotS []string
	for _, a := range got {
		gotS = append(gotS, a.String())
	}
	want := []string{"192.168.1.1:53", "[2001:db8::53]:53", "[fe80::1%eth0]:53", "10.0.0.1:53"}
	if !slices.Equal(gotS, want) {
		t.Errorf("ParseResolvConf = %v, want %v", gotS, want)
	}
	if _, err := ParseResolvConf(strings.NewReader("nameserver dns.example\n")); err == nil {
		t.Error("a host name as nameserver: nil error, want one")
	}
	if got, err := ParseResolvConf(strings.NewReader("")); err != nil || len(got) != 0 {
		t.Errorf("empty file = %v, %v; want none, nil", got, err)
	}
}
