package nftcap

import (
	"net/netip"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	ok := Spec{ListenerPort: 7070, Table: "router"}
	pfx := netip.MustParsePrefix
	ap := netip.MustParseAddrPort
	for _, tc := range []struct {
		name string
		spec func(s *Spec)
		want string // substring of the error; "" means valid
	}{
		{"minimal", func(s *Spec) {}, ""},
		{"typical", func(s *Spec) {
			*s = Spec{Table: "router", VMNetworks: []netip.Prefix{pfx("10.0.2.0/24"), pfx("fd00::/64")}, Local: true, ListenerPort: 1, DNSPort: 2, Mark: 1, Forwards: []Forward{{Listen: ap("10.0.2.2:3"), Allow: []netip.Prefix{pfx("10.0.2.0/24")}}}}
		}, ""},
		{"unmasked prefix is fine", func(s *Spec) { s.VMNetworks = []netip.Prefix{pfx("10.0.2.15/24")} }, ""},
		{"no listener", func(s *Spec) { s.ListenerPort = 0 }, "listener port is 0"},
		{"dns is listener", func(s *Spec) { s.DNSPort = 7070 }, "equals the listener port"},
		{"local without mark", func(s *Spec) { s.Local = true }, "non-zero mark"},
		{"invalid prefix", func(s *Spec) { s.VMNetworks = []netip.Prefix{{}} }, "invalid prefix"},
		{"mapped prefix", func(s *Spec) { s.VMNetworks = []netip.Prefix{pfx("::ffff:10.0.0.0/104")} }, "IPv4-mapped"},
		{"bad table name", func(s *Spec) { s.Table = "a b" }, "table name"},
		{"no table name", func(s *Spec) { s.Table = "" }, "table name"},
		{"long table name", func(s *Spec) { s.Table = strings.Repeat("a", 256) }, "length"},
		{"forward invalid", func(s *Spec) { s.Forwards = []Forward{{}} }, "invalid listen"},
		{"forward port 0", func(s *Spec) { s.Forwards = []Forward{{Listen: ap("10.0.2.2:0")}} }, "port 0"},
		{"forward on listener", func(s *Spec) { s.Forwards = []Forward{{Listen: ap("10.0.2.2:7070")}} }, "listener port"},
		{"forward on dns", func(s *Spec) { s.DNSPort = 53; s.Forwards = []Forward{{Listen: ap("10.0.2.2:53")}} }, "dns port"},
		{"forward bad allow", func(s *Spec) { s.Forwards = []Forward{{Listen: ap("10.0.2.2:1"), Allow: []netip.Prefix{{}}}} }, "allow"},
		{"forward mapped listen", func(s *Spec) { s.Forwards = []Forward{{Listen: ap("[::ffff:10.0.2.2]:1")}} }, "plain IPv4"},
		{"inbound", func(s *Spec) {
			s.Inbounds = []Forward{{Listen: ap("10.0.2.2:1080"), Allow: []netip.Prefix{pfx("10.0.2.0/24")}}}
		}, ""},
		{"inbound on listener", func(s *Spec) { s.Inbounds = []Forward{{Listen: ap("10.0.2.2:7070")}} }, "inbound 0: listen 10.0.2.2:7070: port is the listener port"},
		{"inbound bad allow", func(s *Spec) { s.Inbounds = []Forward{{Listen: ap("10.0.2.2:1"), Allow: []netip.Prefix{{}}}} }, "inbound 0: allow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.spec(&s)
			err := s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("all problems at once", func(t *testing.T) {
		err := Spec{Local: true, Table: "a b"}.Validate()
		for _, want := range []string{"listener port", "mark", "table name"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Validate() = %v, want it to mention %q", err, want)
			}
		}
	})
}
