package dns

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	mdns "github.com/miekg/dns"
)

// packetDialer stands in for a UDP association: a connected UDP socket to the loopback
// zone. It counts associations and can lose the first datagram of each.
type packetDialer struct {
	t         *testing.T
	to        string
	loseFirst bool
	dials     atomic.Int32
	mu        sync.Mutex
	conns     []net.Conn
}

func (p *packetDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	if addr != resolverAddr {
		p.t.Errorf("associate for %s, want %s", addr, resolverAddr)
		return nil, errors.New("unexpected address")
	}
	p.dials.Add(1)
	c, err := (&net.Dialer{}).DialContext(ctx, "udp", p.to)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	if p.loseFirst {
		return &lossy{Conn: c}, nil
	}
	return c, nil
}

// lossy drops the first datagram written.
type lossy struct {
	net.Conn
	sent atomic.Bool
}

func (l *lossy) Write(p []byte) (int, error) {
	if !l.sent.Swap(true) {
		return len(p), nil
	}
	return l.Conn.Write(p)
}

func newUDPProxyServer(t *testing.T, pd *packetDialer) (*Server, *zone, *redirect) {
	t.Helper()
	z := newZone(t, testZone)
	addr := startUDPTCP(t, z)
	pd.t, pd.to = t, addr
	up := &redirect{t: t, wantNetwork: []string{"tcp"}, wantAddr: resolverAddr, to: addr}
	s, err := New(Config{Mode: ModeProxy, Resolver: resolverAddr, Now: newClock().Now},
		Dialers{Proxy: up.dial, ProxyPacket: pd.dial, Direct: failDial(t, "direct")}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, z, up
}

func askUDP(t *testing.T, s *Server, name string, qtype uint16) *mdns.Msg {
	t.Helper()
	q := new(mdns.Msg)
	q.SetQuestion(name, qtype)
	r := s.Handle(context.Background(), q)
	if r == nil {
		t.Fatalf("%s: no answer", name)
	}
	return r
}

// TestUDPTransport: relayed queries go as datagrams over one association, concurrently; a
// truncated answer is asked again over TCP through the proxy.
func TestUDPTransport(t *testing.T) {
	pd := &packetDialer{}
	s, z, up := newUDPProxyServer(t, pd)
	var wg sync.WaitGroup
	for _, name := range []string{"example.com.", "www.example.com.", "short.example.com."} {
		wg.Go(func() {
			if r := askUDP(t, s, name, mdns.TypeA); r.Rcode != mdns.RcodeSuccess || len(r.Answer) == 0 {
				t.Errorf("%s: %v", name, r)
			}
		})
	}
	wg.Wait()
	if n := pd.dials.Load(); n != 1 {
		t.Errorf("%d associations, want 1 for every query", n)
	}
	if up.count() != 0 {
		t.Errorf("%d tcp connections, want none", up.count())
	}
	r := askUDP(t, s, "big.example.", mdns.TypeTXT)
	if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 40 || r.Truncated {
		t.Errorf("big answer: %d records, truncated %v", len(r.Answer), r.Truncated)
	}
	if up.count() != 1 || z.count("big.example TXT") != 2 {
		t.Errorf("tcp connections %d, queries %d; want the truncated answer asked again over tcp", up.count(), z.count("big.example TXT"))
	}
}

// TestUDPTransportResendAndReassociate: a lost datagram is sent again; an association that
// ended is made again at the next query.
func TestUDPTransportResendAndReassociate(t *testing.T) {
	pd := &packetDialer{loseFirst: true}
	s, _, _ := newUDPProxyServer(t, pd)
	if r := askUDP(t, s, "example.com.", mdns.TypeA); r.Rcode != mdns.RcodeSuccess {
		t.Fatalf("after a lost datagram: %v", r)
	}
	pd.mu.Lock()
	pd.conns[0].Close() // the proxy dropped the association
	pd.mu.Unlock()
	if r := askUDP(t, s, "example.com.", mdns.TypeAAAA); r.Rcode != mdns.RcodeSuccess {
		t.Fatalf("after the association ended: %v", r)
	}
	if n := pd.dials.Load(); n != 2 {
		t.Errorf("%d associations, want 2", n)
	}
}
