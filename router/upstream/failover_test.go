package upstream_test

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/internal/winetest"
	"github.com/agentcage/router/router/upstream"
)

// TestFailoverLoopback: two go-socks5 upstreams in a group; the primary
// dies, flows (TCP and UDP) go through the backup; the primary comes back
// on the same port, and after its backoff (on the members' clock, moved by
// the test) the flows return to it.
func TestFailoverLoopback(t *testing.T) {
	target := startTarget(t)
	udp := winetest.UDPUsable(t) // without UDP sockets (Wine), TCP only
	echo := netip.AddrPort{}
	if udp {
		echo = startUDPEcho(t)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	primaryAddr, stopPrimary := startSOCKS(t, ln, true)
	backupAddr, _ := startSOCKS(t, nil, false)
	const backoff = time.Minute
	clock := &skewClock{}
	var members []*upstream.Tracked
	for _, cfg := range []upstream.Config{
		{Name: "primary", Host: "127.0.0.1", Port: primaryAddr.Port(), Username: proxyUser, Password: proxyPass, Pipeline: true},
		{Name: "backup", Host: "127.0.0.1", Port: backupAddr.Port()},
	} {
		tr, err := upstream.Track(newUpstream(t, cfg, upstream.Options{}), upstream.HealthConfig{Backoff: backoff, MaxBackoff: 2 * backoff, Clock: clock}, nil)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, tr)
	}
	g, err := upstream.NewGroup(members...)
	if err != nil {
		t.Fatal(err)
	}
	d := upstream.Addr{IP: target.Addr(), Port: target.Port()}
	ud := upstream.Addr{Name: "localhost", Port: echo.Port()}
	flow := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		c, via, err := g.ConnectVia(ctx, d, []byte("hi\n"))
		if err != nil {
			t.Fatalf("ConnectVia: %v", err)
		}
		defer c.Close()
		expectBannerAndEcho(t, c, "hi\n")
		return via
	}
	datagram := func(want string) {
		t.Helper()
		if !udp {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		a, via, err := g.AssociateVia(ctx)
		if err != nil {
			t.Fatalf("AssociateVia: %v", err)
		}
		defer a.Close()
		if got, _ := roundTrip(t, a, ud, "dgram"); got != "echo:dgram" {
			t.Errorf("answer %q", got)
		}
		if via != want {
			t.Errorf("UDP via %s, want %s", via, want)
		}
	}

	if got := flow(); got != "primary" {
		t.Fatalf("both up: via %s", got)
	}
	datagram("primary")
	stopPrimary()
	if got := flow(); got != "backup" {
		t.Fatalf("primary dead: via %s", got)
	}
	if s := members[0].Status(); s.State != upstream.Down || s.LastError == "" {
		t.Errorf("primary: %+v, want down with its error", s)
	}
	datagram("backup")
	ln2, err := net.Listen("tcp", primaryAddr.String())
	if err != nil {
		t.Fatalf("listen again on %v: %v", primaryAddr, err)
	}
	startSOCKS(t, ln2, true)
	// Until its backoff ends, flows stay on the backup; then the first
	// flow tries the primary and finds it.
	if got := flow(); got != "backup" {
		t.Fatalf("primary back, in its backoff: via %s, want backup", got)
	}
	clock.add(backoff)
	if got := flow(); got != "primary" {
		t.Fatalf("backoff over: via %s, want primary", got)
	}
	if got := flow(); got != "primary" {
		t.Errorf("primary back: via %s", got)
	}
	datagram("primary")
	if s := members[0].Status(); s.State != upstream.Up || s.Latency <= 0 {
		t.Errorf("primary: %+v, want up with a latency", s)
	}
}

// skewClock is the real clock moved forward by add, so that latencies stay
// real while a backoff ends at once.
type skewClock struct {
	mu   sync.Mutex
	skew time.Duration
}

func (c *skewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.skew)
}

func (c *skewClock) add(d time.Duration) {
	c.mu.Lock()
	c.skew += d
	c.mu.Unlock()
}
