package router

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/echotest"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/internal/syncbuf"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// The tests run the router on loopback. A "redirected" connection is simply a connection to
// the router's listener; the test tells the fake Original where it was going, keyed by the
// client's address.
//
// Targets listen on 127.0.0.1, but a loopback destination is local: the policy never
// captures or proxies it. So the router (and the test proxy) know each target by a public
// alias, 198.51.100.1 with the same port, which the tests' DialTCP and the test proxy's
// dialer map back to 127.0.0.1.

const waitFor = 5 * time.Second

var (
	loopback = netip.MustParseAddr("127.0.0.1")
	alias    = netip.MustParseAddr("198.51.100.1")
)

// public is the alias of a loopback address (other addresses are returned as they are).
func public(ap netip.AddrPort) netip.AddrPort {
	if ap.Addr() == loopback {
		return netip.AddrPortFrom(alias, ap.Port())
	}
	return ap
}

// private is the loopback address behind an alias.
func private(ap netip.AddrPort) netip.AddrPort {
	if ap.Addr() == alias {
		return netip.AddrPortFrom(loopback, ap.Port())
	}
	return ap
}

// decision compiles rules (and VM networks) into the policy the tests' routers use; the
// fake-IP pool is the default one.
func decision(rs []rules.Rule, vmNets ...netip.Prefix) *policy.Policy {
	cfg := &conf.Config{Rules: rs, Capture: conf.Capture{VMNetworks: vmNets},
		DNS: conf.DNS{Mode: conf.DNSFakeIP, Pool: netip.MustParsePrefix("198.18.0.0/15")}}
	return policy.New(cfg, policy.Env{})
}

type origTable struct {
	mu sync.Mutex
	m  map[netip.AddrPort]netip.AddrPort
}

func (o *origTable) set(client, dst netip.AddrPort) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[client] = dst
}

// lookup waits (bounded) for the test to register the client, which it does right after
// dialing.
func (o *origTable) lookup(c *net.TCPConn) (netip.AddrPort, error) {
	client := netaddr.AddrPort(c.RemoteAddr())
	var d netip.AddrPort
	err := wait.Until(waitFor, func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		var ok bool
		if d, ok = o.m[client]; !ok {
			return fmt.Errorf("no original destination for %s", client)
		}
		return nil
	})
	return d, err
}

// env is one router on loopback with its upstream proxy and targets.
type env struct {
	t      *testing.T
	r      *Router
	ln     *net.TCPListener
	orig   *origTable
	logs   *syncbuf.Buffer
	marked *countingControl
}

// countingControl stands in for the socket mark: it counts the sockets the router opens.
type countingControl struct {
	mu sync.Mutex
	n  int
}

func (c *countingControl) control(network, address string, _ syscall.RawConn) error {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return nil
}

func (c *countingControl) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// startProxy runs go-socks5 (socks5test) on loopback, resolving the names of hosts and
// dialing loopback only (a public alias as its loopback address), with creds when not nil.
func startProxy(t *testing.T, hosts map[string]netip.Addr, creds map[string]string) *socks5test.Server {
	t.Helper()
	return socks5test.Start(t, socks5test.Options{
		Credentials: creds,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if ap, err := netip.ParseAddrPort(addr); err == nil {
				addr = private(ap).String()
			}
			return socks5test.LoopbackDial(ctx, network, addr)
		},
		Resolve: func(_ context.Context, name string) (netip.Addr, error) {
			if a, ok := hosts[name]; ok {
				return a, nil
			}
			return netip.Addr{}, fmt.Errorf("no such host %q", name)
		},
	})
}

// startTarget runs an echo server that first writes a banner; it returns the server's
// public alias.
func startTarget(t *testing.T, banner string) netip.AddrPort {
	t.Helper()
	return public(echotest.Banner(t, banner, waitFor))
}

func mustRules(t *testing.T, rs ...rules.Rule) *policy.Policy {
	t.Helper()
	return decision(rs)
}

func hostRule(name string, act rules.Action, proxy string, hosts ...string) rules.Rule {
	r := rules.Rule{Name: name, Action: act, Proxy: proxy}
	for _, h := range hosts {
		hh, err := rules.ParseHost(h)
		if err != nil {
			panic(err)
		}
		r.Hosts = append(r.Hosts, hh)
	}
	return r
}

func newEnv(t *testing.T, pol Settings, opts Options) *env {
	t.Helper()
	e := &env{t: t, orig: &origTable{m: map[netip.AddrPort]netip.AddrPort{}}, logs: &syncbuf.Buffer{}, marked: &countingControl{}}
	if opts.Original == nil {
		opts.Original = func(c *net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
			dst, err := e.orig.lookup(c)
			return netaddr.AddrPort(c.RemoteAddr()), dst, err
		}
	}
	opts.Control = e.marked.control
	opts.DialTCP = func(ctx context.Context, dst netip.AddrPort) (*net.TCPConn, error) {
		if !private(dst).Addr().IsLoopback() {
			return nil, fmt.Errorf("the tests dial loopback only, not %v", dst)
		}
		d := net.Dialer{Control: e.marked.control}
		return d.DialTCP(ctx, "tcp", netip.AddrPort{}, private(dst))
	}
	withLoop(&opts, e.marked.control)
	opts.Log = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if pol.IdleTimeout == 0 {
		pol.IdleTimeout = time.Minute
	}
	if pol.ConnectTimeout == 0 {
		pol.ConnectTimeout = 2 * time.Second
	}
	r, err := New(pol, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln := listenLoopback(t)
	e.r, e.ln = r, ln
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		r.Wait()
		r.Close()
		if t.Failed() {
			t.Logf("router log:\n%s", e.logs.String())
		}
	})
	return e
}

// waitLog waits (bounded) until the router's log holds want.
func (e *env) waitLog(want string) {
	e.t.Helper()
	waitLogged(e.t, e.logs, want)
}

// waitLogged waits (bounded) until logs holds want.
func waitLogged(t testing.TB, logs *syncbuf.Buffer, want string) {
	t.Helper()
	if wait.Until(waitFor, func() error {
		if !strings.Contains(logs.String(), want) {
			return errors.New("not in the log")
		}
		return nil
	}) != nil {
		t.Fatalf("log never said %q:\n%s", want, logs.String())
	}
}

// dial connects "through capture" to dst.
func (e *env) dial(dst netip.AddrPort) *net.TCPConn {
	e.t.Helper()
	return e.dialFrom(netip.Addr{}, dst)
}

// dialFrom is dial from the loopback address src (another guest; the zero Addr: any).
func (e *env) dialFrom(src netip.Addr, dst netip.AddrPort) *net.TCPConn {
	e.t.Helper()
	var local *net.TCPAddr
	if src.IsValid() {
		local = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
	}
	c, err := net.DialTCP("tcp", local, net.TCPAddrFromAddrPort(netaddr.AddrPort(e.ln.Addr())))
	if err != nil {
		e.t.Fatal(err)
	}
	e.orig.set(netaddr.AddrPort(c.LocalAddr()), dst)
	c.SetDeadline(time.Now().Add(waitFor))
	e.t.Cleanup(func() { c.Close() })
	return c
}

// listenLoopback listens on a free TCP port of 127.0.0.1; the listener is closed when the
// test ends.
func listenLoopback(t testing.TB) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// closedAddr is a loopback address nothing listens on: a listener's, closed at once.
func closedAddr(t testing.TB) netip.AddrPort {
	t.Helper()
	ln := listenLoopback(t)
	ln.Close()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// dialLoopback connects to addr (a forward's listener), with waitFor as the connection's
// deadline; the connection is closed when the test ends.
func dialLoopback(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(waitFor))
	return c
}

// readBanner reads len(want) bytes from c, within waitFor, and fails the test unless they
// are want.
func readBanner(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(waitFor))
	if got := readN(t, c, len(want)); got != want {
		t.Fatalf("banner %q, want %q", got, want)
	}
}

// waitReturns runs f on a goroutine of its own and fails the test unless it returns within
// waitFor; what says what f waits for, for the error.
func waitReturns(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatalf("%s still waits after %v", what, waitFor)
	}
}

func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return string(b)
}

// wantReset checks that the router refused the connection (reset or close, no data).
func wantReset(t *testing.T, c net.Conn) {
	t.Helper()
	b := make([]byte, 1)
	n, err := c.Read(b)
	if n != 0 || err == nil {
		t.Fatalf("read = %d, %v; want the connection refused", n, err)
	}
	if !errors.Is(err, syscall.ECONNRESET) && err != io.EOF {
		t.Fatalf("read error = %v; want a reset", err)
	}
}

func TestDirect(t *testing.T) {
	target := startTarget(t, "hello\n")
	e := newEnv(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Direct})}, Options{})
	c := e.dial(target)
	if got := readN(t, c, 6); got != "hello\n" {
		t.Fatalf("banner = %q", got)
	}
	io.WriteString(c, "ping")
	if got := readN(t, c, 4); got != "ping" {
		t.Fatalf("echo = %q", got)
	}
	c.Close()
	if e.marked.count() == 0 {
		t.Error("the router's own connection was not marked")
	}
}

func TestProxyHandsTheNameToTheProxy(t *testing.T) {
	target := startTarget(t, "via-proxy\n")
	p := startProxy(t, map[string]netip.Addr{"echo.lab.test": target.Addr()}, map[string]string{"agent": "pw-42"})
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{netip.MustParseAddr("198.18.0.7"): "echo.lab.test"}}
	pol := Settings{
		Decision:  mustRules(t, rules.Rule{Name: "all", Action: rules.Proxy, Proxy: "exit"}),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Addr.Port(), Username: "agent", Password: "pw-42"}}},
	}
	e := newEnv(t, pol, Options{Names: names})
	c := e.dial(netip.AddrPortFrom(netip.MustParseAddr("198.18.0.7"), target.Port()))
	if got := readN(t, c, 10); got != "via-proxy\n" {
		t.Fatalf("banner = %q", got)
	}
	if got := p.Asked(); len(got) != 1 || got[0] != "echo.lab.test" {
		t.Errorf("proxy was asked to resolve %q; want the name echo.lab.test (ATYP domain)", got)
	}
	c.Close()
	// An address of the pool that no DNS answer gave out is refused, never forwarded.
	c = e.dial(netip.AddrPortFrom(netip.MustParseAddr("198.18.0.8"), target.Port()))
	wantReset(t, c)
	if n := len(p.Asked()); n != 1 {
		t.Errorf("proxy asked %d times; the unknown fake IP went out", n)
	}
}

func TestProxyDownFailsClosed(t *testing.T) {
	target := startTarget(t, "x")
	p := startProxy(t, nil, nil)
	p.Stop()
	pol := Settings{
		Decision:  mustRules(t, rules.Rule{Name: "all", Action: rules.Proxy, Proxy: "exit"}),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Addr.Port()}}},
	}
	e := newEnv(t, pol, Options{})
	c := e.dial(target)
	wantReset(t, c)
	e.waitLog("dial proxy")
}

func TestWrongPasswordFailsClosedAndStaysSecret(t *testing.T) {
	target := startTarget(t, "x")
	p := startProxy(t, map[string]netip.Addr{}, map[string]string{"agent": "right"})
	pol := Settings{
		Decision:  mustRules(t, rules.Rule{Name: "all", Action: rules.Proxy, Proxy: "exit"}),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Addr.Port(), Username: "agent", Password: "wrong-secret-pw"}}},
	}
	e := newEnv(t, pol, Options{})
	wantReset(t, e.dial(target))
	e.waitLog("msg=flow")
	if strings.Contains(e.logs.String(), "wrong-secret-pw") {
		t.Errorf("password in log:\n%s", e.logs.String())
	}
}

func TestBlockResets(t *testing.T) {
	target := startTarget(t, "x")
	e := newEnv(t, Settings{Decision: mustRules(t, hostRule("no", rules.Block, "", target.Addr().String()))}, Options{})
	wantReset(t, e.dial(target))
	if e.marked.count() != 0 {
		t.Error("a blocked flow opened a connection")
	}
}

func TestDoTBlockedUnlessProxied(t *testing.T) {
	e := newEnv(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Direct})}, Options{})
	wantReset(t, e.dial(netip.AddrPortFrom(alias, 853)))
	e.waitLog("dns over tls")
}

func TestAppRuleUsesOwner(t *testing.T) {
	target := startTarget(t, "x")
	app := rules.Rule{Name: "hv", Action: rules.Block, Apps: []rules.App{rules.MustApp("VBoxHeadless")}}
	var asked atomic.Int32
	owner := func(_ *net.TCPConn, src, dst netip.AddrPort) (rules.Owner, error) {
		asked.Add(1)
		return rules.Owner{PID: 42, App: "VBoxHeadless"}, nil
	}
	e := newEnv(t, Settings{Decision: mustRules(t, app, rules.Rule{Name: "default", Action: rules.Direct})}, Options{Owner: owner})
	wantReset(t, e.dial(target))
	e.waitLog("app=VBoxHeadless pid=42")
	// Flows from a VM network have no local process: the owner is not asked. (A caged
	// flow skips the bare catch-all, so a rule names the VM's sources.)
	vmNet := netip.MustParsePrefix("127.0.0.0/8")
	vm := rules.Rule{Name: "vm", Action: rules.Direct, Sources: []rules.IPRange{rules.RangeOfPrefix(vmNet)}}
	e.r.Apply(Settings{Decision: decision([]rules.Rule{app, vm, {Name: "default", Action: rules.Direct}}, vmNet), IdleTimeout: time.Minute, ConnectTimeout: time.Second})
	before := asked.Load()
	c := e.dial(target)
	if got := readN(t, c, 1); got != "x" {
		t.Fatalf("got %q", got)
	}
	if asked.Load() != before {
		t.Error("the owner of a VM flow was looked up")
	}
	// Without a rule that names them, VM flows are refused, not sent direct by the
	// catch-all.
	e.r.Apply(Settings{Decision: decision([]rules.Rule{app, {Name: "default", Action: rules.Direct}}, vmNet), IdleTimeout: time.Minute, ConnectTimeout: time.Second})
	wantReset(t, e.dial(target))
	e.waitLog("rule=\"(caged: no rule decides)\"")
}

func TestHalfCloseAndByteCounts(t *testing.T) {
	// A target that reads the whole request to EOF, then answers: the client's CloseWrite
	// must reach it while the answer still comes back.
	ln := listenLoopback(t)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, _ := io.ReadAll(c)
		fmt.Fprintf(c, "got %d bytes", len(req))
	}()
	e := newEnv(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Direct})}, Options{})
	c := e.dial(public(ln.Addr().(*net.TCPAddr).AddrPort()))
	big := strings.Repeat("x", 3<<20)
	if _, err := io.WriteString(c, big); err != nil {
		t.Fatal(err)
	}
	c.CloseWrite()
	resp, err := io.ReadAll(c)
	if err != nil || string(resp) != fmt.Sprintf("got %d bytes", len(big)) {
		t.Fatalf("response %q, %v", resp, err)
	}
	c.Close()
	e.waitLog(fmt.Sprintf("up=%d down=%d", len(big), len(resp)))
}

func TestIdleTimeout(t *testing.T) {
	target := startTarget(t, "")
	e := newEnv(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Direct}), IdleTimeout: 300 * time.Millisecond}, Options{})
	c := e.dial(target)
	// Activity keeps the flow alive past the timeout.
	var last time.Time
	for range 4 {
		io.WriteString(c, "k")
		if readN(t, c, 1) != "k" {
			t.Fatal("echo")
		}
		last = time.Now()
		time.Sleep(150 * time.Millisecond) // not ordering: activity paced under the idle timeout is what is tested
	}
	wantReset(t, c)
	if d := time.Since(last); d < 250*time.Millisecond || d > 3*time.Second {
		t.Errorf("idle flow ended %v after its last byte; the timeout is 300ms", d)
	}
	e.waitLog("end=idle")
}

func TestForward(t *testing.T) {
	target := startTarget(t, "model\n")
	e := newEnv(t, Settings{}, Options{})
	f := Forward{Name: "model", Listen: netip.MustParseAddrPort("127.0.0.1:0"), Connect: private(target), Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := e.r.ListenForward(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	go e.r.ServeForward(ctx, ln, func() *Forward { return &f })
	readBanner(t, dialLoopback(t, ln.Addr().String()), "model\n")
	// A source outside allow is refused.
	f2 := f
	f2.Allow = []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24")}
	ln2, err := e.r.ListenForward(ctx, f2)
	if err != nil {
		t.Fatal(err)
	}
	go e.r.ServeForward(ctx, ln2, func() *Forward { return &f2 })
	c2, err := net.Dial("tcp", ln2.Addr().String())
	if errors.Is(err, syscall.ECONNRESET) {
		return // refused so fast that the reset beat the connect
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(waitFor))
	wantReset(t, c2)
}

// TestForwardStreamsUnbuffered: server-sent events cross the forward as they are sent.
func TestForwardStreamsUnbuffered(t *testing.T) {
	ln := listenLoopback(t)
	sent := make(chan time.Time, 10)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for i := range 5 {
			time.Sleep(100 * time.Millisecond) // not ordering: a paced stream, each event's lag is measured
			sent <- time.Now()
			fmt.Fprintf(c, "data: {\"n\":%d}\n\n", i)
		}
	}()
	e := newEnv(t, Settings{}, Options{})
	f := Forward{Name: "model", Listen: netip.MustParseAddrPort("127.0.0.1:0"), Connect: ln.Addr().(*net.TCPAddr).AddrPort(), Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fl, err := e.r.ListenForward(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	go e.r.ServeForward(ctx, fl, func() *Forward { return &f })
	br := bufio.NewReader(dialLoopback(t, fl.Addr().String()))
	for i := range 5 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		br.ReadString('\n')
		if lag := time.Since(<-sent); lag > 50*time.Millisecond {
			t.Errorf("event %d (%q) arrived %v after it was sent", i, strings.TrimSpace(line), lag)
		}
	}
}

// TestProxyNameResolvedAgainWhenItsAddressFails: a proxy given by name whose remembered
// address stops answering is looked up again for the next flow.
func TestProxyNameResolvedAgainWhenItsAddressFails(t *testing.T) {
	target := startTarget(t, "ok\n")
	p := startProxy(t, nil, nil)
	var mu sync.Mutex
	answers := []netip.Addr{netip.MustParseAddr("127.0.0.2")} // first answer: nothing listens there
	lookups := 0
	resolve := func(ctx context.Context, host string) ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		lookups++
		return answers, nil
	}
	pol := Settings{
		Decision:  mustRules(t, rules.Rule{Name: "all", Action: rules.Proxy, Proxy: "exit"}),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "proxy.test", Port: p.Addr.Port()}}},
	}
	e := newEnv(t, pol, Options{Resolve: resolve})
	wantReset(t, e.dial(target))
	e.waitLog("dial proxy")
	mu.Lock()
	answers = []netip.Addr{p.Addr.Addr()} // the name now points at the live proxy
	mu.Unlock()
	if got := readN(t, e.dial(target), 3); got != "ok\n" {
		t.Fatalf("got %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if lookups != 2 {
		t.Errorf("%d lookups, want 2 (the failed address is not kept)", lookups)
	}
}
