package dns

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
)

// literalNames are address literals as a guest's resolver library could send them.
var literalNames = []string{
	"127.0.0.1.", "127.1.", "0x7f.1.", "2130706433.", "0177.0.0.1.", "0x7f000001.", "10.0.2.2.",
	"169.254.169.254.", "foo.1.", "[::1].", "::1.", "::ffff:127.0.0.1.", "0--1.ipv6-literal.net.",
	`127\.0\.0\.1.`, `127.0.0.1\032x.`, "LOCALHOST.1.",
}

// TestIPLiteralQueries: a query for an address literal is NXDOMAIN in both modes and for
// every type, asks nobody and creates no mapping.
func TestIPLiteralQueries(t *testing.T) {
	ctx := context.Background()
	types := []uint16{mdns.TypeA, mdns.TypeAAAA, mdns.TypeMX, mdns.TypeTXT, mdns.TypePTR, mdns.TypeHTTPS,
		mdns.TypeSVCB, mdns.TypeCNAME, mdns.TypeSRV, mdns.TypeNS, mdns.TypeSOA, mdns.TypeCAA}
	for _, mode := range []Mode{ModeFakeIP, ModeProxy} {
		t.Run(mode.String(), func(t *testing.T) {
			s, z, _ := newProxyServer(t, mode, newClock())
			for _, name := range literalNames {
				for _, qt := range types {
					q := query(name, qt)
					got := s.HandleFrom(ctx, Source{Addr: netip.MustParseAddr("10.0.2.15")}, q)
					if got.Rcode != mdns.RcodeNameError || len(got.Answer) != 0 {
						t.Errorf("%s %s: rcode %s with %d answers, want NXDOMAIN and none",
							name, mdns.Type(qt), mdns.RcodeToString[got.Rcode], len(got.Answer))
					}
				}
			}
			if n := z.totalQueries(); n != 0 {
				t.Errorf("the resolver was asked %d times, want 0", n)
			}
			if st, ok := s.PoolStats(); ok && st.Mapped != 0 {
				t.Errorf("PoolStats.Mapped = %d, want 0", st.Mapped)
			}
			for _, name := range []string{"127.1", "0x7f.1", "2130706433"} {
				if addrs, err := s.ResolveViaProxy(ctx, name); err == nil {
					t.Errorf("ResolveViaProxy(%q) = %v, want an error", name, addrs)
				}
			}
			if n := z.totalQueries(); n != 0 {
				t.Errorf("ResolveViaProxy asked the resolver %d times, want 0", n)
			}
		})
	}
	t.Run("the pool refuses a literal", func(t *testing.T) {
		p := newPool(netip.MustParsePrefix("198.18.0.0/24"), 0, newClock().Now)
		for _, name := range []string{"127.0.0.1", "127.1", "2130706433", "a.0x7f"} {
			if g := p.assign(name, sourceKey{}); g.ok {
				t.Errorf("assign(%q) = %v, want refused", name, g.addr)
			}
		}
		if st := p.stats(); st.Mapped != 0 {
			t.Errorf("Mapped = %d, want 0", st.Mapped)
		}
	})
	t.Run("a direct pattern never makes a literal direct", func(t *testing.T) {
		s, err := New(Config{DirectNames: []string{"*.1", "*.0.1"}},
			Dialers{Direct: failDial(t, "direct"), DirectResolver: "192.0.2.1:53"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		q := query("127.0.0.1.", mdns.TypeA)
		check(t, q, s.Handle(ctx, q), nxdomain())
	})
}

// TestPoolReverseNames: PTR and other types under in-addr.arpa and ip6.arpa for pool
// addresses are answered locally, the IPv4-mapped IPv6 form like the IPv4 one, and never
// create or touch a mapping.
func TestPoolReverseNames(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s, z, _ := newProxyServer(t, ModeFakeIP, c)
	mustA(t, s, "example.com") // 198.18.0.1
	mapped := func(a string) string { return reverseName(netip.MustParseAddr(a)) }
	tests := []struct {
		name string
		q    *mdns.Msg
		want want
	}{
		{"PTR in-addr.arpa", query("1.0.18.198.in-addr.arpa.", mdns.TypePTR),
			want{answer: []string{"1.0.18.198.in-addr.arpa. 10 IN PTR example.com."}}},
		{"PTR ip6.arpa of the mapped address", query(mapped("::ffff:198.18.0.1"), mdns.TypePTR),
			want{answer: []string{mapped("::ffff:198.18.0.1") + " 10 IN PTR example.com."}}},
		{"PTR of an unmapped pool address", query("2.0.18.198.in-addr.arpa.", mdns.TypePTR), nxdomain()},
		{"PTR ip6.arpa of an unmapped pool address", query(mapped("::ffff:198.18.0.2"), mdns.TypePTR), nxdomain()},
		{"PTR of the pool's network address", query("0.0.18.198.in-addr.arpa.", mdns.TypePTR), nxdomain()},
		{"A of a pool reverse name", query("1.0.18.198.in-addr.arpa.", mdns.TypeA), nodata()},
		{"A of an unmapped pool reverse name", query("7.0.18.198.in-addr.arpa.", mdns.TypeA), nxdomain()},
		{"AAAA of a mapped ip6.arpa name", query(mapped("::ffff:198.18.0.1"), mdns.TypeAAAA), nodata()},
		{"TXT of a pool reverse zone", query("0.18.198.in-addr.arpa.", mdns.TypeTXT), nxdomain()},
		{"PTR ip6.arpa of a mapped private address", query(mapped("::ffff:10.0.2.2"), mdns.TypePTR), nxdomain()},
		{"PTR ip6.arpa of a mapped loopback", query(mapped("::ffff:127.0.0.1"), mdns.TypePTR), nxdomain()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, tt.q, s.Handle(ctx, tt.q), tt.want)
		})
	}
	if st, _ := s.PoolStats(); st.Mapped != 1 {
		t.Errorf("Mapped = %d after reverse queries, want 1", st.Mapped)
	}
	if n := z.totalQueries(); n != 0 {
		t.Errorf("the resolver was asked %d times, want 0", n)
	}
}

// TestIPLiteralRefusalsCounted: each literal query counts as a DNS refusal in the Book, with
// its source and name.
func TestIPLiteralRefusalsCounted(t *testing.T) {
	var book refusal.Book
	s, err := New(Config{}, Dialers{Refusals: &book}, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := Source{Addr: netip.MustParseAddr("10.0.2.15"), Owner: rules.Owner{App: "VBoxHeadless.exe"}}
	s.HandleFrom(context.Background(), src, query("127.0.0.1.", mdns.TypeA))
	s.HandleFrom(context.Background(), src, query("example.com.", mdns.TypeA))
	st := book.Snapshot()
	if len(st) != 1 || st[0].Reason != refusal.DNS || st[0].Count != 1 {
		t.Fatalf("refusals = %+v, want one dns", st)
	}
	e := st[0].Recent[0]
	if e.Src.Addr() != src.Addr || !strings.EqualFold(e.App, src.App) || e.Host != "127.0.0.1" {
		t.Errorf("event = %+v", e)
	}
}
