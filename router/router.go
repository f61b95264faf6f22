// Package router is the data path. It takes the TCP connections that capture redirected to
// its transparent listener, asks the rules what to do with each, and then connects direct,
// connects through an upstream SOCKS5 proxy (giving it the host name when one is known), or
// refuses; then it relays both ways. It also serves the model forwards (the replacement for
// `netsh interface portproxy`).
//
// Own traffic versus user traffic: every connection the router opens itself (to a proxy, to a
// direct destination, to a forward's target) goes through one Dialer built with the capture's
// Control function (a socket mark on Linux), so capture never takes it back: there is no loop
// by construction. Nothing here ever falls back from a proxy to a direct connection.
//
// The package knows no platform: the original destination of a redirected connection, the
// socket marking, the owner of a local flow and the fake-IP names come in through Options.
package router

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentcage/router/policy"
	"github.com/agentcage/router/proc"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/socks5"
)

// Names is the DNS side's knowledge of host names: fake-IP pool addresses and, in proxy
// mode, the addresses seen in answers. A nil Names means no name is ever known.
type Names interface {
	// InPool reports whether a is a fake-IP pool address.
	InPool(a netip.Addr) bool
	// Acquire returns the name behind pool address a and keeps the mapping alive until
	// release is called; ok is false for a pool address nobody was given.
	Acquire(a netip.Addr) (name string, release func(), ok bool)
	// NameFor returns a name that resolved to a (proxy mode), if one is known.
	NameFor(a netip.Addr) (string, bool)
	// ResolveViaProxy looks a name up through the proxy, for a fake-IP flow that a rule
	// sends direct.
	ResolveViaProxy(ctx context.Context, name string) ([]netip.Addr, error)
}

// Options are the collaborators of a Router. Original is required; the rest may be nil.
type Options struct {
	Log *slog.Logger
	// Original returns where a redirected connection came from and was going: with a
	// redirect in the kernel (nftables) the source is the accepted connection's peer; with
	// a reflecting capture (WinDivert) the peer is rewritten and only the capture knows.
	Original func(c *net.TCPConn) (src, dst netip.AddrPort, err error)
	// Control is applied to every socket the router opens (mark it as own traffic).
	Control func(network, address string, c syscall.RawConn) error
	// Owner finds the process of a local flow: c is the accepted connection, src the app's
	// address and dst where it was going. It is only asked when the policy needs it
	// (policy.Policy.NeedsOwner).
	Owner func(c *net.TCPConn, src, dst netip.AddrPort) (proc.Info, error)
	// FromVM reports whether a connection from src entered from a VM network or a
	// VM-facing interface (policy.Flow.FromVM), whatever its address. Nil: only sources
	// inside the configured VM networks are.
	FromVM func(src netip.Addr) bool
	// DialTCP opens the router's own connections (direct destinations, upstream proxies).
	// The default dials with Control applied; tests map addresses here.
	DialTCP func(ctx context.Context, dst netip.AddrPort) (*net.TCPConn, error)
	Names   Names
	// Resolve looks up a proxy's host name. It must not go through capture; the default is
	// Go's resolver dialing with Control.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Descriptors is the file descriptors the flow budgets are cut from (see admission);
	// 0: this process's limit (RLIMIT_NOFILE).
	Descriptors int
	// SummaryEvery is the interval of the summary line of refused and failed flows; 0:
	// one minute.
	SummaryEvery time.Duration
}

// Upstream is one [proxy.NAME].
type Upstream struct {
	Name     string
	Host     string // IP or name of the SOCKS5 server
	Port     uint16
	Username string
	Password string
	// Pipeline sends the SOCKS5 greeting and request without waiting in between.
	Pipeline bool
}

// Policy is what a reload replaces: the decision, the upstreams and the limits.
type Policy struct {
	// Decision decides every flow; nil decides as an empty config would (everything that is
	// not caged goes direct).
	Decision       *policy.Policy
	Upstreams      []Upstream
	IdleTimeout    time.Duration
	ConnectTimeout time.Duration
}

// compiled is a Policy prepared for use.
type compiled struct {
	Policy
	ups   map[string]*upstream
	hits  []atomic.Uint64 // [i] rule i
	steps [policy.NumSteps]atomic.Uint64
}

type upstream struct {
	Upstream
	client socks5.Client
}

// Router runs the transparent listener and forwards. Its methods are safe for concurrent
// use; SetPolicy may be called at any time (a reload) and affects new flows only.
type Router struct {
	log    *slog.Logger
	opts   Options
	dialer *net.Dialer
	pol    atomic.Pointer[compiled]
	engine *engine    // relays the flows
	adm    *admission // what flows may hold: set-up slots and descriptors, by source
	refuse *refusals  // refused and failed flows: a few logged, the rest summed up
	early  sync.Pool  // *[earlyMax]byte: a client's first bytes while its flow is set up
	flows  sync.WaitGroup
	live   liveFlows
	nextID atomic.Uint64

	mu      sync.Mutex // guards proxyIP
	proxyIP map[string][]netip.Addr

	names *resolvedNames // what flows' names resolve to, for policy.StepHostName; nil without Names
}

// maxSetups bounds the flows Serve sets up at once (deciding, connecting, the SOCKS
// handshake, which waits for the proxy's own connect: up to a few hundred milliseconds over
// the internet), shared between sources by admission. Relayed flows do not count. Measured on the lab with 2,000 idle flows
// opened in a burst: unbounded, the setup goroutines' stacks and garbage left 7.5-10 KiB of
// RSS per flow; 256 leaves 3.6-4.6 and still sets up about 1,000 flows a second through a
// 250 ms proxy; 64 leaves 2.8 but would queue a browser's burst.
const maxSetups = 256

// New returns a Router with the given policy.
func New(p Policy, opts Options) (*Router, error) {
	if opts.Original == nil {
		return nil, errors.New("router: Original is required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	r := &Router{
		log:     opts.Log,
		opts:    opts,
		dialer:  &net.Dialer{Control: opts.Control, KeepAlive: 30 * time.Second},
		engine:  newEngine(),
		adm:     newAdmission(cmp.Or(opts.Descriptors, descriptorLimit())),
		refuse:  newRefusals(opts.Log, opts.SummaryEvery),
		early:   sync.Pool{New: func() any { return new([earlyMax]byte) }},
		proxyIP: map[string][]netip.Addr{},
	}
	if r.opts.DialTCP == nil {
		r.opts.DialTCP = func(ctx context.Context, dst netip.AddrPort) (*net.TCPConn, error) {
			return r.dialer.DialTCP(ctx, "tcp", netip.AddrPort{}, dst)
		}
	}
	if r.opts.Resolve == nil {
		res := &net.Resolver{PreferGo: true, Dial: r.dialer.DialContext}
		r.opts.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return res.LookupNetIP(ctx, "ip", host)
		}
	}
	if opts.Names != nil {
		r.names = newResolvedNames(opts.Names.ResolveViaProxy)
	}
	if err := r.SetPolicy(p); err != nil {
		return nil, err
	}
	return r, nil
}

// Prepared is a Policy checked and compiled for Use; it belongs to the Router that
// prepared it.
type Prepared struct{ c *compiled }

// Prepare checks p and compiles it for Use, without changing anything: a reload prepares
// first and applies only once everything else of the new config is in place.
func (r *Router) Prepare(p Policy) (*Prepared, error) {
	if p.Decision == nil {
		p.Decision = policy.New(nil, policy.Env{})
	}
	if p.IdleTimeout <= 0 {
		return nil, errors.New("router: idle timeout must be positive")
	}
	if p.ConnectTimeout <= 0 {
		return nil, errors.New("router: connect timeout must be positive")
	}
	np := &compiled{Policy: p, ups: map[string]*upstream{}, hits: make([]atomic.Uint64, len(p.Decision.Rules()))}
	for _, u := range p.Upstreams {
		up := &upstream{Upstream: u, client: socks5.Client{Pipeline: u.Pipeline}}
		if u.Username != "" {
			up.client.Auth = &socks5.Auth{Username: u.Username, Password: u.Password}
		}
		np.ups[u.Name] = up
	}
	for _, rl := range p.Decision.Rules() {
		if rl.Action == rules.Proxy {
			if _, ok := np.ups[rl.Proxy]; !ok {
				return nil, fmt.Errorf("router: rule %q names unknown proxy %q", rl.Name, rl.Proxy)
			}
		}
	}
	return &Prepared{c: np}, nil
}

// Use makes a prepared policy the one new flows get; flows already running keep theirs.
func (r *Router) Use(pp *Prepared) { r.pol.Store(pp.c) }

// SetPolicy prepares p and uses it.
func (r *Router) SetPolicy(p Policy) error {
	pp, err := r.Prepare(p)
	if err != nil {
		return err
	}
	r.Use(pp)
	return nil
}

// Dialer returns the router's own dialer (marked: never captured).
func (r *Router) Dialer() *net.Dialer { return r.dialer }

// DialUpstream connects to address (host:port) through the named upstream proxy; the host is
// handed to the proxy as a name when it is not an IP. The DNS side uses it to reach its
// resolver.
func (r *Router) DialUpstream(ctx context.Context, proxy, address string) (net.Conn, error) {
	up, ok := r.pol.Load().ups[proxy]
	if !ok {
		return nil, fmt.Errorf("dial %s via %s: no such proxy", address, proxy)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s: bad port", address)
	}
	dst := socks5.Addr{Port: uint16(p)}
	if a, err := netip.ParseAddr(host); err == nil {
		dst.IP = a
	} else {
		dst.Name = host
	}
	return r.dialProxy(ctx, up, dst, nil)
}

// dialProxy connects to the upstream and asks it to CONNECT to dst. early, when not empty,
// is the client's first bytes: with a pipelining upstream they go out in the same write as
// the request (the server relays what follows its request once connected), which takes one
// round trip to the proxy out of the flow's first answer. The caller keeps early.
func (r *Router) dialProxy(ctx context.Context, up *upstream, dst socks5.Addr, early []byte) (*net.TCPConn, error) {
	addrs, err := r.proxyAddrs(ctx, up)
	if err != nil {
		return nil, err
	}
	var tc *net.TCPConn
	for _, a := range addrs {
		tc, err = r.opts.DialTCP(ctx, netip.AddrPortFrom(a, up.Port))
		if err == nil {
			break
		}
	}
	if err != nil {
		r.forgetProxyAddrs(up) // the name may point elsewhere now: ask again next time
		return nil, fmt.Errorf("connect to proxy %s: %w", up.Name, err)
	}
	if d, ok := ctx.Deadline(); ok {
		tc.SetDeadline(d)
	}
	var rw io.ReadWriter = tc
	if len(early) > 0 && up.Pipeline {
		rw = &earlyWriter{TCPConn: tc, early: early}
	}
	if _, err := up.client.Handshake(rw, dst); err != nil {
		tc.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return nil, fmt.Errorf("proxy %s: %w", up.Name, err)
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// earlyWriter appends early to the first write (the pipelined handshake), in one writev.
type earlyWriter struct {
	*net.TCPConn
	early []byte
}

func (w *earlyWriter) Write(p []byte) (int, error) {
	if w.early == nil {
		return w.TCPConn.Write(p)
	}
	bufs := net.Buffers{p, w.early}
	w.early = nil
	n, err := bufs.WriteTo(w.TCPConn)
	return int(min(n, int64(len(p)))), err
}

// proxyAddrs resolves an upstream's host, remembering the answer until no address of it
// connects; a failed lookup is retried on the next flow (a proxy name that does not resolve
// at boot must not stay broken).
func (r *Router) proxyAddrs(ctx context.Context, up *upstream) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(up.Host); err == nil {
		return []netip.Addr{a}, nil
	}
	r.mu.Lock()
	addrs := r.proxyIP[up.Host]
	r.mu.Unlock()
	if len(addrs) > 0 {
		return addrs, nil
	}
	addrs, err := r.opts.Resolve(ctx, up.Host)
	if err != nil || len(addrs) == 0 {
		return nil, fmt.Errorf("resolve proxy %s (%s): %w", up.Name, up.Host, errors.Join(err, errNoAddress(len(addrs))))
	}
	r.mu.Lock()
	r.proxyIP[up.Host] = addrs
	r.mu.Unlock()
	return addrs, nil
}

// forgetProxyAddrs drops the remembered addresses of an upstream given by name.
func (r *Router) forgetProxyAddrs(up *upstream) {
	r.mu.Lock()
	delete(r.proxyIP, up.Host)
	r.mu.Unlock()
}

func errNoAddress(n int) error {
	if n == 0 {
		return errors.New("no address")
	}
	return nil
}

// relayFor returns the relay settings of the current policy.
func (r *Router) relayFor(p *compiled) relay {
	return relay{idle: p.IdleTimeout, engine: r.engine}
}

// Wait blocks until every flow started so far has ended.
func (r *Router) Wait() { r.flows.Wait() }

// Close releases the relay's resources; call it after the listeners are closed. Flows still
// running are ended (their log records say "router closed"); Wait then returns once their
// records are written.
func (r *Router) Close() {
	r.engine.Close()
	r.refuse.flush()
}
