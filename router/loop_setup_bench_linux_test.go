package router

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/router/upstream/socks5/socks5test"
	"github.com/agentcage/router/rules"
)

// BenchmarkSetup weighs the two set-up paths of a transparent flow on Linux against each
// other: the event loop's (loop_setup_linux.go) and the goroutine path every flow took before it
// (Options.GoroutineSetup), for a direct flow and one through a SOCKS5 proxy (go-socks5 on
// loopback). Each round opens conns connections through both routers, one after another
// (each to the target's one-byte banner, then closed), the order of the paths alternating
// between rounds, and reports per path the median over the rounds of the time a connection
// took and of this process's CPU per connection (the client, proxy and target run here
// too: they cost both paths alike, so the difference is the router's).
//
//	go test -run '^$' -bench BenchmarkSetup -benchtime 1x ./router/
func BenchmarkSetup(b *testing.B) {
	const (
		rounds = 15
		conns  = 300 // per round and path
	)
	target := benchTarget(b)
	var dials atomic.Int64 // the proxy's: every socks5 flow goes through it
	gs := socks5test.Start(b, socks5test.Options{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			addr = private(ap).String()
		}
		return socks5test.LoopbackDial(ctx, network, addr)
	}})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	for _, kind := range []struct {
		name string
		pol  Settings
	}{
		{"direct", Settings{Decision: decision([]rules.Rule{{Name: "all", Action: rules.Direct}})}},
		{"socks5", proxied(gs.Addr, true, "", "")},
	} {
		paths := []struct {
			name string
			addr string
			r    *Router
			took []time.Duration // per round: median per connection
			cpu  []time.Duration // per round: per connection
		}{
			{name: "loop"},
			{name: "goroutine"},
		}
		paths[0].addr, paths[0].r = benchRouter(b, ctx, kind.pol, target, false)
		paths[1].addr, paths[1].r = benchRouter(b, ctx, kind.pol, target, true)
		for round := range rounds {
			for i := range paths {
				p := &paths[(i+round)%len(paths)]
				took := make([]time.Duration, 0, conns)
				before := cpuTime(b)
				for range conns {
					start := time.Now()
					benchConn(b, p.addr)
					took = append(took, time.Since(start))
				}
				p.cpu = append(p.cpu, (cpuTime(b)-before)/conns)
				p.took = append(p.took, medianDur(took))
			}
		}
		if loop, goroutine := paths[0].r.loops.setups.Load(), paths[1].r.loops.setups.Load(); loop != rounds*conns || goroutine != 0 {
			b.Fatalf("flows set up on the loops: %d and %d; want %d and none", loop, goroutine, rounds*conns)
		}
		if n := dials.Swap(0); kind.name == "socks5" && n != 2*rounds*conns {
			b.Fatalf("the proxy dialled %d times; want %d", n, 2*rounds*conns)
		}
		for _, p := range paths {
			b.Logf("%s, %s: %v a connection (median of %d rounds of %d), CPU %v a connection",
				kind.name, p.name, medianDur(p.took).Round(time.Microsecond), rounds, conns, medianDur(p.cpu).Round(time.Microsecond))
		}
		ratio := make([]float64, rounds)
		cpuRatio := make([]float64, rounds)
		for i := range rounds {
			ratio[i] = float64(paths[1].took[i]) / float64(paths[0].took[i])
			cpuRatio[i] = float64(paths[1].cpu[i]) / float64(paths[0].cpu[i])
		}
		b.Logf("%s: goroutine ÷ loop, median of the paired rounds: time a connection %.2f, CPU a connection %.2f",
			kind.name, medianF(ratio), medianF(cpuRatio))
	}
}

// benchTarget accepts connections on loopback and writes each a one-byte banner; it
// returns the target's public alias (a loopback destination is the host's, which the
// rules never send through a proxy).
func benchTarget(b *testing.B) netip.AddrPort {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte{'x'})
			c.Close()
		}
	}()
	return netip.AddrPortFrom(alias, ln.Addr().(*net.TCPAddr).AddrPort().Port())
}

// benchRouter serves pol on a loopback listener whose every connection's original
// destination is target, its flows set up on the loops or (goroutine) on goroutines.
func benchRouter(b *testing.B, ctx context.Context, pol Settings, target netip.AddrPort, goroutine bool) (string, *Router) {
	pol.IdleTimeout, pol.ConnectTimeout = time.Minute, 2*time.Second
	opts := Options{
		Original: func(c *net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
			return c.RemoteAddr().(*net.TCPAddr).AddrPort(), target, nil
		},
	}
	// Both paths connect to the alias's loopback address, each its own way.
	if goroutine {
		opts.DialTCP = func(ctx context.Context, dst netip.AddrPort) (*net.TCPConn, error) {
			var d net.Dialer
			return d.DialTCP(ctx, "tcp", netip.AddrPort{}, private(dst))
		}
	} else {
		opts.OriginalFD = func(_ int, peer netip.AddrPort) (netip.AddrPort, netip.AddrPort, error) { return peer, target, nil }
		opts.ConnectFD = func(dst netip.AddrPort) (int, error) {
			var raw rawFD
			fd, _, err := dialFD(&raw, nil, private(dst))
			return fd, err
		}
	}
	r, err := New(pol, opts)
	if err != nil {
		b.Fatal(err)
	}
	ln := listenLoopback(b)
	done := make(chan struct{})
	go func() { defer close(done); r.Serve(ctx, ln) }()
	b.Cleanup(func() { ln.Close(); <-done; r.Wait(); r.Close() })
	return ln.Addr().String(), r
}

// benchConn connects to addr, reads the banner and closes.
func benchConn(b *testing.B, addr string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var one [1]byte
	if _, err := io.ReadFull(c, one[:]); err != nil {
		b.Fatal(fmt.Errorf("the banner through %s: %w", addr, err))
	}
}

// cpuTime is this process's user and system CPU so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func medianDur(xs []time.Duration) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func medianF(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
