package dns

import (
	"context"
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"
)

// newFakeIP returns a fake-IP server with no proxy dialer and direct dialers that fail the
// test: nothing may leave.
func newFakeIP(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = newClock().Now
	}
	s, err := New(cfg, Dialers{Direct: failDial(t, "direct")}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestFakeIPAnswers(t *testing.T) {
	s := newFakeIP(t, Config{})
	ctx := context.Background()
	// Order matters: addresses are handed out in sequence.
	tests := []struct {
		name string
		q    *mdns.Msg
		want want
	}{
		{"A first name", query("example.com.", mdns.TypeA),
			want{answer: []string{"example.com. 10 IN A 198.18.0.1"}}},
		{"A second name", query("www.example.org.", mdns.TypeA),
			want{answer: []string{"www.example.org. 10 IN A 198.18.0.2"}}},
		{"A same name other case keeps address and case", query("ExAmple.COM.", mdns.TypeA),
			want{answer: []string{"ExAmple.COM. 10 IN A 198.18.0.1"}}},
		{"A single label", query("wpad.", mdns.TypeA),
			want{answer: []string{"wpad. 10 IN A 198.18.0.3"}}},
		{"A underscore label", query("_dmarc.example.com.", mdns.TypeA),
			want{answer: []string{"_dmarc.example.com. 10 IN A 198.18.0.4"}}},
		{"AAAA is NODATA", query("example.com.", mdns.TypeAAAA), nodata()},
		{"HTTPS is NODATA", query("example.com.", mdns.TypeHTTPS), nodata()},
		{"SVCB is NODATA", query("_dns.example.com.", mdns.TypeSVCB), nodata()},
		{"MX without proxy is NODATA", query("example.com.", mdns.TypeMX), nodata()},
		{"TXT without proxy is NODATA", query("example.com.", mdns.TypeTXT), nodata()},
		{"PTR of a pool address gives the name", query("1.0.18.198.in-addr.arpa.", mdns.TypePTR),
			want{answer: []string{"1.0.18.198.in-addr.arpa. 10 IN PTR example.com."}}},
		{"PTR of an unknown pool address is NXDOMAIN", query("9.9.18.198.in-addr.arpa.", mdns.TypePTR), nxdomain()},
		{"TXT of a pool reverse name is NODATA", query("2.0.18.198.in-addr.arpa.", mdns.TypeTXT), nodata()},
		{"PTR of a private address is NXDOMAIN", query("20.1.168.192.in-addr.arpa.", mdns.TypePTR), nxdomain()},
		{"PTR of a VM NAT address is NXDOMAIN", query("2.2.0.10.in-addr.arpa.", mdns.TypePTR), nxdomain()},
		{"PTR of ULA IPv6 is NXDOMAIN", query("1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", mdns.TypePTR), nxdomain()},
		{"SOA of the pool reverse zone is NXDOMAIN", query("18.198.in-addr.arpa.", mdns.TypeSOA), nxdomain()},
		{"PTR of a public address without proxy is NODATA", query("8.8.8.8.in-addr.arpa.", mdns.TypePTR), nodata()},
		{"A of a reverse name is NODATA", query("8.8.8.8.in-addr.arpa.", mdns.TypeA), nodata()},
		{"A of the root is NODATA", query(".", mdns.TypeA), nodata()},
		{"A of a name with a space is NXDOMAIN", query(`a\ b.example.`, mdns.TypeA), nxdomain()},
		{"A of a name with a high byte is NXDOMAIN", query(`caf\233.example.`, mdns.TypeA), nxdomain()},
		{"localhost A", query("localhost.", mdns.TypeA),
			want{answer: []string{"localhost. 10 IN A 127.0.0.1"}}},
		{"sub.localhost AAAA", query("app.LOCALHOST.", mdns.TypeAAAA),
			want{answer: []string{"app.LOCALHOST. 10 IN AAAA ::1"}}},
		{"localhost MX is NODATA", query("localhost.", mdns.TypeMX), nodata()},
		{"invalid is NXDOMAIN", query("foo.invalid.", mdns.TypeA), nxdomain()},
		{"Firefox's canary is NXDOMAIN", query("use-application-dns.net.", mdns.TypeA), nxdomain()},
		{"Firefox's canary AAAA is NXDOMAIN", query("Use-Application-DNS.net.", mdns.TypeAAAA), nxdomain()},
		{"ANY is NOTIMP", query("example.com.", mdns.TypeANY), want{rcode: mdns.RcodeNotImplemented}},
		{"AXFR is NOTIMP", query("example.com.", mdns.TypeAXFR), want{rcode: mdns.RcodeNotImplemented}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.Handle(ctx, tt.q)
			check(t, tt.q, got, tt.want)
			if got != nil && got.Authoritative {
				t.Errorf("AA set, want clear")
			}
			if got != nil && !got.RecursionAvailable {
				t.Errorf("RA clear, want set")
			}
		})
	}
	t.Run("NameFor", func(t *testing.T) {
		for addr, wantName := range map[string]string{
			"198.18.0.1": "example.com", "198.18.0.2": "www.example.org", "::ffff:198.18.0.1": "example.com",
		} {
			got, ok := s.NameFor(netip.MustParseAddr(addr))
			if !ok || got != wantName {
				t.Errorf("NameFor(%s) = %q, %v; want %q, true", addr, got, ok, wantName)
			}
		}
		for _, addr := range []string{"198.18.9.9", "198.18.0.0", "198.19.255.255", "192.0.2.1"} {
			if got, ok := s.NameFor(netip.MustParseAddr(addr)); ok {
				t.Errorf("NameFor(%s) = %q, true; want false", addr, got)
			}
		}
	})
}

func TestHeaderAndEDNS(t *testing.T) {
	s := newFakeIP(t, Config{})
	ctx := context.Background()
	withOpt := func(m *mdns.Msg, size uint16, do bool, version uint8) *mdns.Msg {
		m.SetEdns0(size, do)
		m.IsEdns0().SetVersion(version)
		return m
	}
	t.Run("CHAOS is REFUSED", func(t *testing.T) {
		q := new(mdns.Msg)
		q.Id = 7
		q.Question = []mdns.Question{{Name: "version.bind.", Qtype: mdns.TypeTXT, Qclass: mdns.ClassCHAOS}}
		check(t, q, s.Handle(ctx, q), want{rcode: mdns.RcodeRefused})
	})
	t.Run("HESIOD is REFUSED", func(t *testing.T) {
		q := new(mdns.Msg)
		q.Question = []mdns.Question{{Name: "example.com.", Qtype: mdns.TypeA, Qclass: mdns.ClassHESIOD}}
		check(t, q, s.Handle(ctx, q), want{rcode: mdns.RcodeRefused})
	})
	t.Run("no question is FORMERR", func(t *testing.T) {
		q := new(mdns.Msg)
		q.Id = 9
		check(t, q, s.Handle(ctx, q), want{rcode: mdns.RcodeFormatError})
	})
	t.Run("two questions is FORMERR", func(t *testing.T) {
		q := query("a.example.", mdns.TypeA)
		q.Question = append(q.Question, mdns.Question{Name: "b.example.", Qtype: mdns.TypeA, Qclass: mdns.ClassINET})
		got := s.Handle(ctx, q)
		if got.Rcode != mdns.RcodeFormatError || len(got.Answer) != 0 {
			t.Errorf("rcode %s answers %d, want FORMERR and none", mdns.RcodeToString[got.Rcode], len(got.Answer))
		}
	})
	t.Run("UPDATE is NOTIMP", func(t *testing.T) {
		q := query("example.com.", mdns.TypeSOA)
		q.Opcode = mdns.OpcodeUpdate
		got := s.Handle(ctx, q)
		if got.Rcode != mdns.RcodeNotImplemented || got.Opcode != mdns.OpcodeUpdate {
			t.Errorf("rcode %s opcode %d, want NOTIMP and UPDATE", mdns.RcodeToString[got.Rcode], got.Opcode)
		}
	})
	t.Run("a response gets no reply", func(t *testing.T) {
		q := query("example.com.", mdns.TypeA)
		q.Response = true
		if got := s.Handle(ctx, q); got != nil {
			t.Errorf("reply = %v, want nil", got)
		}
	})
	t.Run("EDNS0 is answered with EDNS0", func(t *testing.T) {
		q := withOpt(query("edns.example.", mdns.TypeA), 4096, false, 0)
		got := s.Handle(ctx, q)
		check(t, q, got, want{answer: []string{"edns.example. 10 IN A 198.18.0.1"}})
		opt := got.IsEdns0()
		if opt == nil || opt.UDPSize() != 1232 || opt.Do() || opt.Version() != 0 {
			t.Errorf("OPT = %v, want udp 1232, DO clear, version 0", opt)
		}
	})
	t.Run("DO bit is copied", func(t *testing.T) {
		q := withOpt(query("edns.example.", mdns.TypeAAAA), 1232, true, 0)
		got := s.Handle(ctx, q)
		check(t, q, got, nodata())
		if opt := got.IsEdns0(); opt == nil || !opt.Do() {
			t.Errorf("OPT = %v, want DO set", opt)
		}
	})
	t.Run("no EDNS0 in, none out", func(t *testing.T) {
		got := s.Handle(ctx, query("edns.example.", mdns.TypeA))
		if opt := got.IsEdns0(); opt != nil {
			t.Errorf("OPT = %v, want none", opt)
		}
	})
	t.Run("EDNS version 1 is BADVERS", func(t *testing.T) {
		q := withOpt(query("edns.example.", mdns.TypeA), 1232, false, 1)
		got := s.Handle(ctx, q)
		if got.Rcode != mdns.RcodeBadVers || len(got.Answer) != 0 {
			t.Fatalf("rcode %s answers %d, want BADVERS and none", mdns.RcodeToString[got.Rcode], len(got.Answer))
		}
		wire, err := got.Pack()
		if err != nil {
			t.Fatalf("pack: %v", err)
		}
		back := new(mdns.Msg)
		if err := back.Unpack(wire); err != nil || back.Rcode != mdns.RcodeBadVers {
			t.Errorf("unpacked rcode %d err %v, want BADVERS", back.Rcode, err)
		}
	})
	t.Run("two OPT records is FORMERR", func(t *testing.T) {
		q := withOpt(query("edns.example.", mdns.TypeA), 1232, false, 0)
		q.SetEdns0(1232, false)
		check(t, q, s.Handle(ctx, q), want{rcode: mdns.RcodeFormatError})
	})
	t.Run("request is not modified", func(t *testing.T) {
		q := withOpt(query("Edns.example.", mdns.TypeA), 4096, true, 0)
		before := q.String()
		s.Handle(ctx, q)
		if after := q.String(); after != before {
			t.Errorf("request changed:\n%s\nto\n%s", before, after)
		}
	})
}

func TestHandleWire(t *testing.T) {
	s := newFakeIP(t, Config{})
	ctx := context.Background()
	q := query("wire.example.", mdns.TypeA)
	q.Id = 0x1234
	wire, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("answer", func(t *testing.T) {
		out := s.HandleWire(ctx, wire, true)
		got := new(mdns.Msg)
		if err := got.Unpack(out); err != nil {
			t.Fatalf("unpack reply: %v", err)
		}
		check(t, q, got, want{answer: []string{"wire.example. 10 IN A 198.18.0.1"}})
	})
	t.Run("truncated body is FORMERR", func(t *testing.T) {
		out := s.HandleWire(ctx, wire[:len(wire)-3], true)
		got := new(mdns.Msg)
		if err := got.Unpack(out); err != nil {
			t.Fatalf("unpack reply: %v", err)
		}
		if got.Id != 0x1234 || got.Rcode != mdns.RcodeFormatError || !got.Response || !got.RecursionDesired {
			t.Errorf("reply id %#x rcode %s qr %v rd %v, want 0x1234 FORMERR true true",
				got.Id, mdns.RcodeToString[got.Rcode], got.Response, got.RecursionDesired)
		}
	})
	t.Run("short is dropped", func(t *testing.T) {
		if out := s.HandleWire(ctx, wire[:11], true); out != nil {
			t.Errorf("reply = %x, want nil", out)
		}
	})
	t.Run("response is dropped", func(t *testing.T) {
		r := append([]byte(nil), wire...)
		r[2] |= 0x80
		if out := s.HandleWire(ctx, r, false); out != nil {
			t.Errorf("reply = %x, want nil", out)
		}
	})
}

func TestNewRejects(t *testing.T) {
	ok := Dialers{}
	tests := []struct {
		name string
		cfg  Config
		d    Dialers
	}{
		{"pool smaller than /24", Config{Pool: netip.MustParsePrefix("198.18.0.0/25")}, ok},
		{"IPv6 pool", Config{Pool: netip.MustParsePrefix("fd00::/64")}, ok},
		{"pool with host bits", Config{Pool: netip.MustParsePrefix("198.18.0.1/15")}, ok},
		{"ttl under a second", Config{TTL: 500_000_000}, ok},
		{"ttl not whole seconds", Config{TTL: 1_500_000_000}, ok},
		{"linger under ttl", Config{TTL: 60_000_000_000, Linger: 1_000_000_000}, ok},
		{"resolver without port", Config{Resolver: "1.1.1.1"}, ok},
		{"resolver with port 0", Config{Resolver: "1.1.1.1:0"}, ok},
		{"proxy mode without proxy dialer", Config{Mode: ModeProxy}, ok},
		{"unknown mode", Config{Mode: Mode(7)}, ok},
		{"direct names without dialer", Config{DirectNames: []string{"*.lan"}}, Dialers{DirectResolver: "192.0.2.1:53"}},
		{"direct names without resolver", Config{DirectNames: []string{"*.lan"}}, Dialers{Direct: failDial(t, "direct")}},
		{"direct resolver by name", Config{DirectNames: []string{"*.lan"}}, Dialers{Direct: failDial(t, "direct"), DirectResolver: "dns.lan:53"}},
		{"bare star", Config{DirectNames: []string{"*"}}, ok},
		{"inner star", Config{DirectNames: []string{"a.*.lan"}}, ok},
		{"empty name", Config{DirectNames: []string{""}}, ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s, err := New(tt.cfg, tt.d, nil); err == nil {
				t.Errorf("New = %v, nil; want an error", s)
			}
		})
	}
	t.Run("accepts a /24 pool and the defaults", func(t *testing.T) {
		for _, cfg := range []Config{{}, {Pool: netip.MustParsePrefix("198.18.0.0/24")}, {Pool: netip.MustParsePrefix("10.200.0.0/16")}} {
			if _, err := New(cfg, ok, nil); err != nil {
				t.Errorf("New(%+v) = %v, want nil", cfg.Pool, err)
			}
		}
	})
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeFakeIP, "fake-ip": ModeFakeIP, "proxy": ModeProxy} {
		got, err := ParseMode(in)
		if err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", in, got, err, want)
		}
		if in != "" && got.String() != in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), in)
		}
	}
	if _, err := ParseMode("fakeip"); err == nil {
		t.Error(`ParseMode("fakeip") = nil error, want one`)
	}
}
