package dns

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"
)

// lanZone is what the host's own resolver knows.
var lanZone = map[string][]string{
	"printer.lan A":    {"printer.lan. 120 IN A 192.168.1.20"},
	"printer.lan AAAA": {"printer.lan. 120 IN AAAA fd00::20"},
	"myhost A":         {"myhost. 60 IN A 192.168.1.2"},
	"many.lan TXT": func() []string { // too big for 512 bytes of UDP: truncated, then TCP
		var out []string
		for i := range 40 {
			out = append(out, fmt.Sprintf(`many.lan. 300 IN TXT "%02d 345678901234567890123456789012345678"`, i))
		}
		return out
	}(),
	"20.1.168.192.in-addr.arpa PTR": {"20.1.168.192.in-addr.arpa. 120 IN PTR printer.lan."},
}

const lanResolver = "192.168.1.1:53" // what resolv.conf would say; the test dialer goes to loopback

func TestDirectNames(t *testing.T) {
	for _, mode := range []Mode{ModeFakeIP, ModeProxy} {
		t.Run(mode.String(), func(t *testing.T) {
			lan := newZone(t, lanZone)
			direct := &redirect{t: t, wantNetwork: []string{"udp", "tcp"}, wantAddr: lanResolver, to: startUDPTCP(t, lan)}
			proxyZone := newZone(t, testZone)
			proxy := &redirect{t: t, wantNetwork: []string{"tcp"}, wantAddr: resolverAddr, to: startTCP(t, proxyZone)}
			s, err := New(Config{
				Mode: mode, Resolver: resolverAddr, Now: newClock().Now,
				DirectNames: []string{"*.LAN", "myhost.", "*.168.192.in-addr.arpa"},
			}, Dialers{Proxy: proxy.dial, Direct: direct.dial, DirectResolver: lanResolver}, nil)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer s.Close()
			ctx := context.Background()
			tests := []struct {
				name string
				q    *mdns.Msg
				want want
			}{
				{"A below a suffix", query("Printer.lan.", mdns.TypeA), want{answer: []string{"printer.lan. 120 IN A 192.168.1.20"}}},
				{"AAAA below a suffix", query("printer.lan.", mdns.TypeAAAA), want{answer: []string{"printer.lan. 120 IN AAAA fd00::20"}}},
				{"exact name", query("myhost.", mdns.TypeA), want{answer: []string{"myhost. 60 IN A 192.168.1.2"}}},
				{"NXDOMAIN from the host resolver", query("gone.lan.", mdns.TypeA), want{rcode: mdns.RcodeNameError,
					ns: []string{"example. 3600 IN SOA ns.example. host.example. 1 3600 600 86400 60"}}},
				{"truncated over UDP, retried over TCP", query("many.lan.", mdns.TypeTXT), want{answer: lanZone["many.lan TXT"]}},
				{"private PTR listed as direct", query("20.1.168.192.in-addr.arpa.", mdns.TypePTR), want{answer: []string{
					"20.1.168.192.in-addr.arpa. 120 IN PTR printer.lan."}}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					check(t, tt.q, s.Handle(ctx, tt.q), tt.want)
				})
			}
			if got := lan.count("many.lan TXT"); got != 2 {
				t.Errorf("host resolver saw %d many.lan queries, want 2 (udp then tcp)", got)
			}
			t.Run("the suffix itself is not direct", func(t *testing.T) {
				before := lan.totalQueries()
				s.Handle(ctx, query("lan.", mdns.TypeA))
				s.Handle(ctx, query("notmyhost.", mdns.TypeA))
				s.Handle(ctx, query("printer.lan.example.", mdns.TypeA))
				if got := lan.totalQueries(); got != before {
					t.Errorf("host resolver saw %d more queries, want 0", got-before)
				}
			})
			t.Run("cached", func(t *testing.T) {
				s.Handle(ctx, query("printer.lan.", mdns.TypeA))
				if got := lan.count("printer.lan A"); got != 1 {
					t.Errorf("host resolver saw %d printer.lan A queries, want 1", got)
				}
			})
			t.Run("NameFor knows direct answers", func(t *testing.T) {
				if got, ok := s.NameFor(netip.MustParseAddr("192.168.1.20")); !ok || got != "printer.lan" {
					t.Errorf("NameFor(192.168.1.20) = %q, %v; want printer.lan, true", got, ok)
				}
			})
			t.Run("after Close, no direct query", func(t *testing.T) {
				s.Close()
				before := lan.totalQueries()
				q := query("after-close.lan.", mdns.TypeA)
				check(t, q, s.Handle(ctx, q), want{rcode: mdns.RcodeServerFailure})
				if got := lan.totalQueries(); got != before {
					t.Errorf("host resolver saw %d queries after Close, want 0", got-before)
				}
			})
			t.Run("the proxy never sees direct names", func(t *testing.T) {
				for _, key := range []string{"printer.lan A", "myhost A", "many.lan TXT", "gone.lan A"} {
					if got := proxyZone.count(key); got != 0 {
						t.Errorf("proxy resolver saw %d %q queries", got, key)
					}
				}
			})
		})
	}
}

// TestNothingDirect sends every kind of query through both modes with a direct dialer that
// fails the test when called: without DirectNames, nothing is resolved directly.
func TestNothingDirect(t *testing.T) {
	types := []uint16{mdns.TypeA, mdns.TypeAAAA, mdns.TypeHTTPS, mdns.TypeSVCB, mdns.TypeMX, mdns.TypeTXT,
		mdns.TypeSRV, mdns.TypePTR, mdns.TypeNS, mdns.TypeSOA, mdns.TypeCNAME, mdns.TypeCAA, mdns.TypeDS}
	names := []string{"example.com.", "lan.", "printer.lan.", "localhost.", "8.8.8.8.in-addr.arpa.",
		"20.1.168.192.in-addr.arpa.", "1.0.18.198.in-addr.arpa.", ".", "local.", "myhost.local."}
	for _, mode := range []Mode{ModeFakeIP, ModeProxy} {
		t.Run(mode.String(), func(t *testing.T) {
			proxyZone := newZone(t, testZone)
			proxy := &redirect{t: t, wantNetwork: []string{"tcp"}, wantAddr: resolverAddr, to: startTCP(t, proxyZone)}
			s, err := New(Config{Mode: mode, Resolver: resolverAddr}, Dialers{Proxy: proxy.dial, Direct: failDial(t, "direct")}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, n := range names {
				for _, qt := range types {
					if r := s.Handle(context.Background(), query(n, qt)); r == nil {
						t.Errorf("%s %s: no reply", n, mdns.Type(qt))
					}
				}
			}
		})
	}
}
