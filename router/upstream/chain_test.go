package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/httpconnect/httpconnecttest"
	"github.com/agentcage/router/router/upstream/socks4/socks4test"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
)

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// resolveLocalhost resolves "localhost" only, to 127.0.0.1.
func resolveLocalhost(_ context.Context, host string) ([]netip.Addr, error) {
	if host == "localhost" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, fmt.Errorf("test resolves localhost only, not %q", host)
}

func TestSOCKS4Connect(t *testing.T) {
	target := startTarget(t)
	srv := socks4test.Start(t, socks5test.LoopbackDial, false)
	for _, pipeline := range []bool{false, true} {
		t.Run(fmt.Sprint("pipeline=", pipeline), func(t *testing.T) {
			var cd countingDial
			u := newUpstream(t, upstream.Config{Name: "old", Type: upstream.SOCKS4, Host: "127.0.0.1", Port: srv.Addr.Port(), Username: "agent", Pipeline: pipeline}, upstream.Options{Dial: cd.dial})
			for _, d := range []upstream.Addr{{IP: target.Addr(), Port: target.Port()}, {Name: "localhost", Port: target.Port()}} {
				c, err := u.Connect(ctxTimeout(t), d, []byte("early\n"))
				if err != nil {
					t.Fatalf("Connect %s: %v", d, err)
				}
				expectBannerAndEcho(t, c, "early\n")
				c.Close()
			}
			if _, err := u.Associate(ctxTimeout(t)); !errors.Is(err, upstream.ErrUDPUnsupported) {
				t.Errorf("Associate: %v, want ErrUDPUnsupported", err)
			}
		})
	}
	// The name went to the server unresolved (SOCKS4a), with the user ID.
	want := fmt.Sprintf("agent@localhost:%d", target.Port())
	if asked := srv.Asked(); !slices.Contains(asked, want) {
		t.Errorf("server was asked %q, want %q among them", asked, want)
	}
}

func TestSOCKS4Refusals(t *testing.T) {
	target := startTarget(t)
	plain := socks4test.Start(t, socks5test.LoopbackDial, true) // knows no SOCKS4a
	var cd countingDial
	u := newUpstream(t, upstream.Config{Name: "old", Type: upstream.SOCKS4, Host: "127.0.0.1", Port: plain.Addr.Port()}, upstream.Options{Dial: cd.dial})
	var ue *upstream.Error
	_, err := u.Connect(ctxTimeout(t), upstream.Addr{Name: "localhost", Port: target.Port()}, nil)
	if !errors.As(err, &ue) || !ue.Refused || !strings.Contains(err.Error(), "rejected") {
		t.Errorf("a name through a SOCKS4-only server: %v, want a refusal (91)", err)
	}
	before := cd.tcp.Load()
	_, err = u.Connect(ctxTimeout(t), upstream.Addr{IP: mustAddr("::1"), Port: target.Port()}, nil)
	if !errors.As(err, &ue) || !ue.Refused || !strings.Contains(err.Error(), "IPv6") {
		t.Errorf("IPv6 through SOCKS4: %v, want a refusal naming IPv6", err)
	}
	if cd.tcp.Load() != before {
		t.Error("IPv6 through SOCKS4: the proxy was dialed")
	}
}

// TestChain runs real chains on loopback: each hop is a server of its protocol, the last
// hop gets the destination's name, and the first hop alone is dialed by the router.
func TestChain(t *testing.T) {
	target := startTarget(t)
	socks, stopSOCKS := startSOCKS(t, nil, true)
	httpProxy := httpconnecttest.Start(t, httpconnecttest.Options{})
	s4 := socks4test.Start(t, socks5test.LoopbackDial, false)
	hops := map[string]upstream.Config{
		"socks5": {Name: "socks5", Host: "127.0.0.1", Port: socks.Port(), Username: proxyUser, Password: proxyPass, Pipeline: true},
		"http":   {Name: "http", Type: upstream.HTTP, Host: "localhost", Port: httpProxy.Addr.Port()},
		"socks4": {Name: "socks4", Type: upstream.SOCKS4, Host: "127.0.0.1", Port: s4.Addr.Port()},
	}
	build := func(t *testing.T, cd *countingDial, names ...string) upstream.Upstream {
		var prev upstream.Upstream
		for _, n := range names {
			cfg, opts := hops[n], upstream.Options{Dial: cd.dial, Resolve: resolveLocalhost}
			if prev != nil {
				cfg.Via, opts.Via = prev.Name(), prev
			}
			prev = newUpstream(t, cfg, opts)
		}
		return prev
	}
	for _, chain := range [][]string{{"socks5", "http"}, {"http", "socks5"}, {"socks5", "socks4"}, {"http", "socks5", "socks4"}} {
		t.Run(strings.Join(chain, "-"), func(t *testing.T) {
			var cd countingDial
			u := build(t, &cd, chain...)
			asked := len(s4.Asked())
			for _, d := range []upstream.Addr{{IP: target.Addr(), Port: target.Port()}, {Name: "localhost", Port: target.Port()}} {
				c, err := u.Connect(ctxTimeout(t), d, []byte("early\n"))
				if err != nil {
					t.Fatalf("Connect %s: %v", d, err)
				}
				expectBannerAndEcho(t, c, "early\n")
				c.Close()
			}
			if got := cd.tcp.Load(); got != 2 {
				t.Errorf("the router dialed %d TCP connections, want 2 (the first hop, once per flow)", got)
			}
			if chain[len(chain)-1] == "socks4" {
				if got := s4.Asked()[asked+1]; got != fmt.Sprintf("@localhost:%d", target.Port()) {
					t.Errorf("the last hop was asked for %q, want the name", got)
				}
			}
			if _, err := u.Associate(ctxTimeout(t)); !errors.Is(err, upstream.ErrUDPUnsupported) {
				t.Errorf("Associate through a chain: %v, want ErrUDPUnsupported", err)
			}
		})
	}
	t.Run("dead first hop fails closed", func(t *testing.T) {
		var cd countingDial
		u := build(t, &cd, "socks5", "http")
		stopSOCKS()
		_, err := u.Connect(ctxTimeout(t), upstream.Addr{Name: "localhost", Port: target.Port()}, nil)
		var ue *upstream.Error
		if !errors.As(err, &ue) || ue.Refused || ue.Upstream != "http" || !strings.Contains(err.Error(), "through socks5") {
			t.Errorf("Connect with the first hop down: %v, want a failure of the chain naming its first hop", err)
		}
		if cd.tcp.Load() != 1 || cd.udp.Load() != 0 {
			t.Errorf("dials: %d TCP, %d UDP; want only the first hop, once", cd.tcp.Load(), cd.udp.Load())
		}
	})
	t.Run("a chain in a failover list", func(t *testing.T) {
		// The chain's first hop is down (stopped above): the chain fails and counts it, the
		// list goes on to the next member, and the chain is down for its backoff.
		var cd countingDial
		chain, err := upstream.Track(build(t, &cd, "socks5", "http"), upstream.HealthConfig{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		alone := hops["http"]
		alone.Name = "http-alone"
		direct, err := upstream.Track(newUpstream(t, alone, upstream.Options{Dial: cd.dial, Resolve: resolveLocalhost}), upstream.HealthConfig{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := upstream.NewGroup(chain, direct)
		if err != nil {
			t.Fatal(err)
		}
		c, err := g.Connect(ctxTimeout(t), upstream.Addr{Name: "localhost", Port: target.Port()}, nil)
		if err != nil {
			t.Fatalf("failover past the broken chain: %v", err)
		}
		expectBannerAndEcho(t, c, "")
		c.Close()
		if st := chain.Status(); st.State != upstream.Down {
			t.Errorf("the chain with its first hop down is %v, want down", st.State)
		}
	})
	t.Run("via must be given", func(t *testing.T) {
		cfg := hops["http"]
		cfg.Via = "socks5"
		if _, err := upstream.New(cfg, upstream.Options{Dial: socks5test.LoopbackDial}); err == nil {
			t.Error("New with Config.Via and no Options.Via succeeded")
		}
	})
}
