package dns

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
)

// fakeWhy answers with the asking source and the destination it was asked about.
type fakeWhy struct{}

func (fakeWhy) Why(src Source, host string, port uint16) []string {
	return []string{"from " + src.Addr.String(), "to " + netip.AddrPortFrom(netip.IPv4Unspecified(), port).String()[len("0.0.0.0"):] + " " + host, strings.Repeat("x", 300)}
}

// TestWhyAnswer: a TXT query for PORT.HOST.why.router.invalid is answered by the router
// itself with what Why says about the asking source and that destination (one TXT record,
// its lines joined by line feeds, in strings of at most 255 bytes), in every mode; other types get no data, a name that is not
// PORT.HOST NXDOMAIN, and without Why the name is NXDOMAIN like the rest of .invalid.
func TestWhyAnswer(t *testing.T) {
	for _, mode := range []Mode{ModeFakeIP, ModeProxy} {
		s, err := New(Config{Mode: mode, Now: newClock().Now}, Dialers{Why: fakeWhy{}, Proxy: failDial(t, "proxy")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		guest := Source{Addr: netip.MustParseAddr("10.0.2.15")}
		cases := []struct {
			name  string
			qtype uint16
			rcode int
			want  []string
		}{
			{"443.example.com.why.router.invalid.", mdns.TypeTXT, mdns.RcodeSuccess, []string{"from 10.0.2.15", "to :443 example.com"}},
			{"80.203.0.113.7.why.router.invalid.", mdns.TypeTXT, mdns.RcodeSuccess, []string{"from 10.0.2.15", "to :80 203.0.113.7"}},
			{"22.2001-db8--1.why.router.invalid.", mdns.TypeTXT, mdns.RcodeSuccess, []string{"from 10.0.2.15", "to :22 2001:db8::1"}},
			{"443.Example.COM.why.router.invalid.", mdns.TypeTXT, mdns.RcodeSuccess, []string{"from 10.0.2.15", "to :443 example.com"}},
			{"443.example.com.why.router.invalid.", mdns.TypeA, mdns.RcodeSuccess, nil},
			{"example.com.why.router.invalid.", mdns.TypeTXT, mdns.RcodeNameError, nil},
			{"0.example.com.why.router.invalid.", mdns.TypeTXT, mdns.RcodeNameError, nil},
			{"65536.example.com.why.router.invalid.", mdns.TypeTXT, mdns.RcodeNameError, nil},
			{"443.why.router.invalid.", mdns.TypeTXT, mdns.RcodeNameError, nil},
			{"why.router.invalid.", mdns.TypeTXT, mdns.RcodeNameError, nil},
		}
		for _, c := range cases {
			m := s.HandleFrom(context.Background(), guest, query(c.name, c.qtype))
			if m.Rcode != c.rcode {
				t.Errorf("%v %s %s: rcode %s, want %s", mode, c.name, mdns.Type(c.qtype), mdns.RcodeToString[m.Rcode], mdns.RcodeToString[c.rcode])
				continue
			}
			if c.want == nil {
				if len(m.Answer) != 0 {
					t.Errorf("%v %s: answer %v, want none", mode, c.name, m.Answer)
				}
				continue
			}
			if len(m.Answer) != 1 {
				t.Fatalf("%v %s: answer %v, want one TXT", mode, c.name, m.Answer)
			}
			txt := m.Answer[0].(*mdns.TXT)
			if m.Answer[0].Header().Ttl != 0 {
				t.Errorf("%v %s: TTL %d, want 0 (the answer is the current config's)", mode, c.name, m.Answer[0].Header().Ttl)
			}
			if got := strings.Join(txt.Txt, ""); !strings.HasPrefix(got, strings.Join(c.want, "\n")+"\n") || !strings.HasSuffix(got, strings.Repeat("x", 300)) {
				t.Errorf("%v %s: TXT %q, want the lines %q joined by line feeds", mode, c.name, txt.Txt, c.want)
			}
			for _, s := range txt.Txt {
				if len(s) > 255 {
					t.Errorf("%v %s: a TXT string of %d bytes", mode, c.name, len(s))
				}
			}
			if _, err := m.Pack(); err != nil {
				t.Errorf("%v %s: pack: %v", mode, c.name, err)
			}
		}
	}
	s, err := New(Config{Now: newClock().Now}, Dialers{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if m := s.HandleFrom(context.Background(), Source{}, query("443.example.com.why.router.invalid.", mdns.TypeTXT)); m.Rcode != mdns.RcodeNameError {
		t.Errorf("without Why: rcode %s, want NXDOMAIN", mdns.RcodeToString[m.Rcode])
	}
}

func FuzzWhyName(f *testing.F) {
	f.Add("443.example.com.why.router.invalid")
	f.Add("22.2001-db8--1.why.router.invalid")
	f.Add("80.1.2.3.4.why.router.invalid")
	f.Add("why.router.invalid")
	f.Fuzz(func(t *testing.T, name string) {
		host, port, ok := parseWhyName(name)
		if !ok {
			return
		}
		if port == 0 || host == "" {
			t.Fatalf("%q: host %q port %d", name, host, port)
		}
		if _, err := netip.ParseAddr(host); err != nil && !isHostname(host) {
			t.Fatalf("%q: %q is neither an address nor a host name", name, host)
		}
	})
}
