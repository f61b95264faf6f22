package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/clock/clocktest"
)

// resolverAddr is the resolver the server believes it talks to through the proxy; the test
// dialer checks it and connects to a loopback server instead. Nothing is sent to it.
const resolverAddr = "192.0.2.53:53"

var testZone = map[string][]string{
	"example.com A":            {"example.com. 300 IN A 192.0.2.10", "example.com. 300 IN A 192.0.2.11"},
	"example.com AAAA":         {"example.com. 300 IN AAAA 2001:db8::10"},
	"example.com MX":           {"example.com. 3600 IN MX 10 mail.example.com.", "mail.example.com. 3600 IN A 192.0.2.25", "mail.example.com. 3600 IN AAAA 2001:db8::25"},
	"example.com TXT":          {`example.com. 120 IN TXT "v=spf1 -all"`},
	"example.com HTTPS":        {`example.com. 300 IN HTTPS 1 . alpn="h2" ipv4hint="192.0.2.12"`},
	"www.example.com A":        {"www.example.com. 600 IN CNAME cdn.example.net.", "cdn.example.net. 60 IN A 192.0.2.20"},
	"short.example.com A":      {"short.example.com. 0 IN A 192.0.2.30"},
	"broken.example A":         {"SERVFAIL"},
	"8.8.8.8.in-addr.arpa PTR": {"8.8.8.8.in-addr.arpa. 3600 IN PTR dns.google."},
	"big.example TXT": func() []string {
		var out []string
		for range 40 {
			out = append(out, `big.example. 300 IN TXT "0123456789012345678901234567890123456789"`)
		}
		return out
	}(),
}

// newProxyServer runs testZone on loopback TCP and returns a server in mode whose proxy
// dialer reaches it, with a failing direct dialer.
func newProxyServer(t *testing.T, mode Mode, c *clocktest.Clock) (*Server, *zone, *redirect) {
	t.Helper()
	z := newZone(t, testZone)
	up := &redirect{t: t, wantNetwork: []string{"tcp"}, wantAddr: resolverAddr, to: startTCP(t, z)}
	s, err := New(Config{Mode: mode, Resolver: resolverAddr, Now: c.Now},
		Dialers{Proxy: up.dial, Direct: failDial(t, "direct")}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, z, up
}

func TestProxyModeAnswers(t *testing.T) {
	s, _, _ := newProxyServer(t, ModeProxy, newClock())
	ctx := context.Background()
	tests := []struct {
		name string
		q    *mdns.Msg
		want want
	}{
		{"A", query("Example.com.", mdns.TypeA), want{answer: []string{
			"example.com. 300 IN A 192.0.2.10", "example.com. 300 IN A 192.0.2.11"}}},
		{"AAAA", query("example.com.", mdns.TypeAAAA), want{answer: []string{"example.com. 300 IN AAAA 2001:db8::10"}}},
		{"HTTPS relayed", query("example.com.", mdns.TypeHTTPS), want{answer: []string{
			`example.com. 300 IN HTTPS 1 . alpn="h2" ipv4hint="192.0.2.12"`}}},
		{"MX with glue", query("example.com.", mdns.TypeMX), want{
			answer: []string{"example.com. 3600 IN MX 10 mail.example.com."},
			extra:  []string{"mail.example.com. 3600 IN A 192.0.2.25", "mail.example.com. 3600 IN AAAA 2001:db8::25"}}},
		{"CNAME chain", query("www.example.com.", mdns.TypeA), want{answer: []string{
			"www.example.com. 600 IN CNAME cdn.example.net.", "cdn.example.net. 60 IN A 192.0.2.20"}}},
		{"PTR of a public address", query("8.8.8.8.in-addr.arpa.", mdns.TypePTR), want{answer: []string{
			"8.8.8.8.in-addr.arpa. 3600 IN PTR dns.google."}}},
		{"NXDOMAIN with the upstream SOA", query("nope.example.", mdns.TypeA), want{rcode: mdns.RcodeNameError,
			ns: []string{"example. 3600 IN SOA ns.example. host.example. 1 3600 600 86400 60"}}},
		{"upstream SERVFAIL", query("broken.example.", mdns.TypeA), want{rcode: mdns.RcodeServerFailure}},
		{"private PTR stays local", query("2.2.0.10.in-addr.arpa.", mdns.TypePTR), nxdomain()},
		{"localhost stays local", query("localhost.", mdns.TypeA), want{answer: []string{"localhost. 10 IN A 127.0.0.1"}}},
		{"CHAOS is REFUSED", &mdns.Msg{Question: []mdns.Question{{Name: "id.server.", Qtype: mdns.TypeTXT, Qclass: mdns.ClassCHAOS}}},
			want{rcode: mdns.RcodeRefused}},
		{"ANY is NOTIMP", query("example.com.", mdns.TypeANY), want{rcode: mdns.RcodeNotImplemented}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, tt.q, s.Handle(ctx, tt.q), tt.want)
		})
	}
	t.Run("EDNS0 is ours, not the upstream's", func(t *testing.T) {
		q := query("example.com.", mdns.TypeTXT)
		q.SetEdns0(4096, true)
		got := s.Handle(ctx, q)
		check(t, q, got, want{answer: []string{`example.com. 120 IN TXT "v=spf1 -all"`}})
		if opt := got.IsEdns0(); opt == nil || opt.UDPSize() != 1232 || !opt.Do() {
			t.Errorf("OPT = %v, want ours: udp 1232, DO copied", opt)
		}
	})
	t.Run("NameFor remembers answered addresses", func(t *testing.T) {
		for addr, wantName := range map[string]string{
			"192.0.2.10": "example.com", "192.0.2.11": "example.com", "2001:db8::10": "example.com",
			"192.0.2.20": "www.example.com", // the name asked for, not the CNAME target
			"192.0.2.12": "example.com",     // HTTPS ipv4hint
		} {
			if got, ok := s.NameFor(netip.MustParseAddr(addr)); !ok || got != wantName {
				t.Errorf("NameFor(%s) = %q, %v; want %q, true", addr, got, ok, wantName)
			}
		}
		for _, addr := range []string{"192.0.2.25", "198.18.0.1"} { // glue is not remembered
			if got, ok := s.NameFor(netip.MustParseAddr(addr)); ok {
				t.Errorf("NameFor(%s) = %q, true; want false", addr, got)
			}
		}
	})
}

func TestProxyCache(t *testing.T) {
	c := newClock()
	s, z, up := newProxyServer(t, ModeProxy, c)
	ctx := context.Background()
	ask := func(name string, qtype uint16) *mdns.Msg {
		t.Helper()
		return s.Handle(ctx, query(name, qtype))
	}
	t.Run("one connection carries the queries", func(t *testing.T) {
		for _, name := range []string{"example.com.", "www.example.com.", "nope.example."} {
			ask(name, mdns.TypeTXT)
		}
		if got := up.count(); got != 1 {
			t.Errorf("proxy dials = %d for %d queries, want 1", got, z.totalQueries())
		}
	})
	t.Run("answers are cached for their TTL", func(t *testing.T) {
		ask("example.com.", mdns.TypeA)
		c.Advance(100 * time.Second)
		q := query("EXAMPLE.com.", mdns.TypeA)
		r := s.Handle(ctx, q)
		if got := z.count("example.com A"); got != 1 {
			t.Errorf("upstream queries = %d, want 1", got)
		}
		check(t, q, r, want{answer: []string{
			"example.com. 200 IN A 192.0.2.10", "example.com. 200 IN A 192.0.2.11"}})
		c.Advance(200 * time.Second)
		ask("example.com.", mdns.TypeA)
		if got := z.count("example.com A"); got != 2 {
			t.Errorf("upstream queries after the TTL = %d, want 2", got)
		}
	})
	t.Run("the smallest TTL of the answer counts", func(t *testing.T) {
		ask("www.example.com.", mdns.TypeA)
		c.Advance(59 * time.Second)
		ask("www.example.com.", mdns.TypeA)
		if got := z.count("www.example.com A"); got != 1 {
			t.Errorf("upstream queries at 59 s = %d, want 1", got)
		}
		c.Advance(time.Second)
		ask("www.example.com.", mdns.TypeA)
		if got := z.count("www.example.com A"); got != 2 {
			t.Errorf("upstream queries at 60 s = %d, want 2", got)
		}
	})
	t.Run("TTL 0 is not cached", func(t *testing.T) {
		ask("short.example.com.", mdns.TypeA)
		ask("short.example.com.", mdns.TypeA)
		if got := z.count("short.example.com A"); got != 2 {
			t.Errorf("upstream queries = %d, want 2", got)
		}
	})
	t.Run("negative answers are cached for the SOA minimum", func(t *testing.T) {
		ask("nope.example.", mdns.TypeA)
		c.Advance(59 * time.Second)
		ask("nope.example.", mdns.TypeA)
		if got := z.count("nope.example A"); got != 1 {
			t.Errorf("upstream queries at 59 s = %d, want 1", got)
		}
		c.Advance(time.Second)
		ask("nope.example.", mdns.TypeA)
		if got := z.count("nope.example A"); got != 2 {
			t.Errorf("upstream queries at 60 s = %d, want 2", got)
		}
	})
	t.Run("SERVFAIL is not cached", func(t *testing.T) {
		ask("broken.example.", mdns.TypeA)
		ask("broken.example.", mdns.TypeA)
		if got := z.count("broken.example A"); got != 2 {
			t.Errorf("upstream queries = %d, want 2", got)
		}
	})
	t.Run("types are cached apart", func(t *testing.T) {
		before := z.count("example.com AAAA")
		ask("example.com.", mdns.TypeAAAA)
		if got := z.count("example.com AAAA"); got != before+1 {
			t.Errorf("AAAA upstream queries = %d, want %d", got, before+1)
		}
	})
	t.Run("remembered names expire", func(t *testing.T) {
		c := newClock()
		s, _, _ := newProxyServer(t, ModeProxy, c)
		s.Handle(ctx, query("example.com.", mdns.TypeA)) // TTL 300 s
		c.Advance(299 * time.Second)
		if _, ok := s.NameFor(netip.MustParseAddr("192.0.2.10")); !ok {
			t.Error("NameFor at 299 s: not found, want example.com")
		}
		c.Advance(2 * time.Second)
		if got, ok := s.NameFor(netip.MustParseAddr("192.0.2.10")); ok {
			t.Errorf("NameFor at 301 s = %q, want expired", got)
		}
	})
}

func TestFakeIPRelay(t *testing.T) {
	s, z, _ := newProxyServer(t, ModeFakeIP, newClock())
	ctx := context.Background()
	tests := []struct {
		name string
		q    *mdns.Msg
		want want
	}{
		{"A is fake, not relayed", query("example.com.", mdns.TypeA), want{answer: []string{"example.com. 10 IN A 198.18.0.1"}}},
		{"AAAA is NODATA, not relayed", query("example.com.", mdns.TypeAAAA), nodata()},
		{"HTTPS is NODATA, not relayed", query("example.com.", mdns.TypeHTTPS), nodata()},
		{"MX is relayed without address glue", query("example.com.", mdns.TypeMX), want{
			answer: []string{"example.com. 3600 IN MX 10 mail.example.com."}}},
		{"TXT is relayed", query("example.com.", mdns.TypeTXT), want{answer: []string{`example.com. 120 IN TXT "v=spf1 -all"`}}},
		{"public PTR is relayed", query("8.8.8.8.in-addr.arpa.", mdns.TypePTR), want{answer: []string{
			"8.8.8.8.in-addr.arpa. 3600 IN PTR dns.google."}}},
		{"NXDOMAIN is relayed", query("nope.example.", mdns.TypeTXT), want{rcode: mdns.RcodeNameError,
			ns: []string{"example. 3600 IN SOA ns.example. host.example. 1 3600 600 86400 60"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, tt.q, s.Handle(ctx, tt.q), tt.want)
		})
	}
	for _, key := range []string{"example.com A", "example.com AAAA", "example.com HTTPS"} {
		if got := z.count(key); got != 0 {
			t.Errorf("upstream saw %d %q queries, want 0", got, key)
		}
	}
	t.Run("relayed addresses are not remembered", func(t *testing.T) {
		if got, ok := s.NameFor(netip.MustParseAddr("192.0.2.25")); ok {
			t.Errorf("NameFor(192.0.2.25) = %q, want unknown", got)
		}
	})
}

func TestResolveViaProxy(t *testing.T) {
	s, z, _ := newProxyServer(t, ModeFakeIP, newClock())
	ctx := context.Background()
	mustA(t, s, "example.com") // a pool address exists for the name
	t.Run("A and AAAA", func(t *testing.T) {
		got, err := s.ResolveViaProxy(ctx, "example.com")
		want := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8::10")}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ResolveViaProxy = %v, %v; want %v, nil", got, err, want)
		}
	})
	t.Run("cached", func(t *testing.T) {
		s.ResolveViaProxy(ctx, "example.com")
		if got := z.count("example.com A"); got != 1 {
			t.Errorf("upstream A queries = %d, want 1", got)
		}
	})
	t.Run("follows the CNAME answer", func(t *testing.T) {
		got, err := s.ResolveViaProxy(ctx, "www.example.com.")
		if err != nil || !slices.Equal(got, []netip.Addr{netip.MustParseAddr("192.0.2.20")}) {
			t.Errorf("ResolveViaProxy = %v, %v; want [192.0.2.20]", got, err)
		}
	})
	t.Run("NXDOMAIN is an error", func(t *testing.T) {
		if got, err := s.ResolveViaProxy(ctx, "nope.example"); err == nil {
			t.Errorf("ResolveViaProxy = %v, nil; want an error", got)
		}
	})
	t.Run("IP literal", func(t *testing.T) {
		got, err := s.ResolveViaProxy(ctx, "192.0.2.99")
		if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("192.0.2.99") {
			t.Errorf("ResolveViaProxy = %v, %v", got, err)
		}
	})
	t.Run("without a proxy dialer", func(t *testing.T) {
		n := newFakeIP(t, Config{})
		if got, err := n.ResolveViaProxy(ctx, "example.com"); err == nil {
			t.Errorf("ResolveViaProxy = %v, nil; want an error", got)
		}
	})
}

func TestUpstreamFailure(t *testing.T) {
	ctx := context.Background()
	t.Run("proxy down is SERVFAIL, never direct", func(t *testing.T) {
		var dials atomic.Int32
		down := func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return nil, errors.New("connection refused")
		}
		for _, mode := range []Mode{ModeProxy, ModeFakeIP} {
			s, err := New(Config{Mode: mode, Now: newClock().Now}, Dialers{Proxy: down, Direct: failDial(t, "direct")}, nil)
			if err != nil {
				t.Fatal(err)
			}
			q := query("example.com.", mdns.TypeMX)
			check(t, q, s.Handle(ctx, q), want{rcode: mdns.RcodeServerFailure})
			check(t, q, s.Handle(ctx, q), want{rcode: mdns.RcodeServerFailure})
		}
		if got := dials.Load(); got != 4 {
			t.Errorf("proxy dials = %d, want 4", got)
		}
	})
	t.Run("a resolver that never answers times out to SERVFAIL", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close() // hold it open, say nothing
			}
		}()
		up := &redirect{t: t, wantNetwork: []string{"tcp"}, wantAddr: conf.DefaultResolver, to: ln.Addr().String()}
		s, err := New(Config{Mode: ModeProxy, Timeout: 200 * time.Millisecond}, Dialers{Proxy: up.dial}, nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		q := query("example.com.", mdns.TypeA)
		check(t, q, s.Handle(ctx, q), want{rcode: mdns.RcodeServerFailure})
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("took %v, want about the 200 ms timeout", d)
		}
	})
	t.Run("closed idle connection is retried once on a new one", func(t *testing.T) {
		z := newZone(t, testZone)
		// A resolver that closes each connection after one answer.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &mdns.Server{Listener: ln, Handler: z, MaxTCPQueries: 1}
		startMiekg(t, srv)
		up := &redirect{t: t, wantNetwork: []string{"tcp"}, wantAddr: resolverAddr, to: ln.Addr().String()}
		s, err := New(Config{Mode: ModeProxy, Resolver: resolverAddr}, Dialers{Proxy: up.dial}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"example.com.", "www.example.com.", "8.8.8.8.in-addr.arpa."} {
			q := query(name, mdns.TypeA)
			if got := s.Handle(ctx, q); got.Rcode == mdns.RcodeServerFailure {
				t.Errorf("%s: SERVFAIL, want an answer", name)
			}
		}
		if got := up.count(); got < 3 || got > 5 {
			t.Errorf("dials = %d, want 3 to 5", got)
		}
	})
	t.Run("after Close, relays fail and fake answers work", func(t *testing.T) {
		s, _, _ := newProxyServer(t, ModeFakeIP, newClock())
		s.Close()
		s.Close()
		q := query("example.com.", mdns.TypeTXT)
		check(t, q, s.Handle(ctx, q), want{rcode: mdns.RcodeServerFailure})
		q = query("example.com.", mdns.TypeA)
		check(t, q, s.Handle(ctx, q), want{answer: []string{"example.com. 10 IN A 198.18.0.1"}})
	})
}
