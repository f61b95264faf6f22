// Package socks5test runs a SOCKS5 proxy (go-socks5, an implementation other than ours) on
// loopback for tests: the upstream, the router, the daemon, `router check-proxy` and the
// bench talk to it as to a real proxy. By default it dials loopback only and resolves only
// "localhost", so that no test traffic and no test lookup leaves the machine.
package socks5test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"

	gosocks5 "github.com/things-go/go-socks5"
)

// Options says how a Server behaves; the zero value is a proxy without authentication on a
// new 127.0.0.1 port that dials loopback only and resolves "localhost" only.
type Options struct {
	// Listener is where the proxy serves; nil: a new one on 127.0.0.1:0. The Server owns it.
	Listener net.Listener
	// Credentials are the username/password pairs it accepts; nil: no authentication.
	Credentials map[string]string
	// Dial opens the proxy's connections to the destinations; nil: LoopbackDial.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Resolve looks up the names that clients ask for; nil: "localhost" is 127.0.0.1 and
	// every other name fails.
	Resolve func(ctx context.Context, name string) (netip.Addr, error)
}

// Server is a running proxy. It stops at the test's cleanup, or earlier with Stop.
type Server struct {
	// Addr is where the proxy listens.
	Addr netip.AddrPort

	ln      net.Listener
	done    chan struct{}
	stop    sync.Once
	resolve func(ctx context.Context, name string) (netip.Addr, error)

	mu    sync.Mutex
	asked []string // guarded by mu
}

// Start runs a proxy with o until the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	ln := o.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatalf("socks5test: listen: %v", err)
		}
	}
	s := &Server{Addr: ln.Addr().(*net.TCPAddr).AddrPort(), ln: ln, done: make(chan struct{}), resolve: o.Resolve}
	if s.resolve == nil {
		s.resolve = localhostOnly
	}
	dial := o.Dial
	if dial == nil {
		dial = LoopbackDial
	}
	opts := []gosocks5.Option{gosocks5.WithDial(dial), gosocks5.WithResolver(resolver{s})}
	if o.Credentials != nil {
		opts = append(opts, gosocks5.WithCredential(gosocks5.StaticCredentials(o.Credentials)))
	}
	srv := gosocks5.NewServer(opts...)
	go func() {
		defer close(s.done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(s.Stop)
	return s
}

// Stop closes the listener and waits for the accept loop to end; connections being served
// go on until their ends close. It may be called more than once.
func (s *Server) Stop() {
	s.stop.Do(func() {
		s.ln.Close()
		<-s.done
	})
}

// Asked returns the names clients asked the proxy to resolve, in order.
func (s *Server) Asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.asked)
}

// resolver is go-socks5's NameResolver over the Server's Resolve.
type resolver struct{ s *Server }

func (r resolver) Resolve(ctx context.Context, name string) (context.Context, net.IP, error) {
	r.s.mu.Lock()
	r.s.asked = append(r.s.asked, name)
	r.s.mu.Unlock()
	a, err := r.s.resolve(ctx, name)
	if err != nil {
		return ctx, nil, err
	}
	return ctx, a.AsSlice(), nil
}

func localhostOnly(_ context.Context, name string) (netip.Addr, error) {
	if name == "localhost" {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
	}
	return netip.Addr{}, fmt.Errorf("socks5test: no such host %q (the test proxy resolves localhost only)", name)
}

// LoopbackDial dials addr when it is on loopback ("localhost" is 127.0.0.1) and refuses
// anything else, so that no test traffic leaves the machine.
func LoopbackDial(ctx context.Context, network, addr string) (net.Conn, error) {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "localhost" {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("socks5test: the test proxy dials loopback only, not %q", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}
