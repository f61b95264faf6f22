package router

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/socks5"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
	"github.com/agentcage/router/rules"
)

// The inbound tests run an inbound on 127.0.0.1:0 beside the env's transparent listener;
// clients connect from 127.0.0.1, which is this machine: not caged unless the test's policy
// puts 127.0.0.0/8 in the VM networks.

// startInbound serves in (Listen 127.0.0.1:0) with e's router; it returns the address.
func (e *env) startInbound(in Inbound) netip.AddrPort {
	e.t.Helper()
	in.Listen = netip.MustParseAddrPort("127.0.0.1:0")
	if in.Name == "" {
		in.Name = "test-" + string(in.Type)
	}
	if in.Allow == nil {
		in.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	ln, err := e.r.ListenInbound(context.Background(), in)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.r.ServeInbound(ctx, ln, func() *Inbound { return &in }) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("ServeInbound: %v", err)
		}
	})
	return netaddr.AddrPort(ln.Addr())
}

// dialInbound connects to an inbound, with the test's deadline.
func (e *env) dialInbound(addr netip.AddrPort) net.Conn {
	e.t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		e.t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(waitFor))
	e.t.Cleanup(func() { c.Close() })
	return c
}

// socksConnect asks a SOCKS5 inbound for dst; it returns the connection and the reply code
// (0: success).
func (e *env) socksConnect(addr netip.AddrPort, dst socks5.Addr) (net.Conn, byte) {
	e.t.Helper()
	c := e.dialInbound(addr)
	_, err := (&socks5.Client{}).Handshake(c, dst)
	var re *socks5.ReplyError
	switch {
	case err == nil:
		return c, 0
	case errors.As(err, &re):
		return c, re.Code
	default:
		e.t.Fatalf("socks5 handshake: %v", err)
		return nil, 0
	}
}

// httpConnect sends a CONNECT for target (and extra bytes in the same write) to an HTTP
// inbound; it returns the connection, positioned after the answer's head, and the status.
func (e *env) httpConnect(addr netip.AddrPort, target, extra string) (net.Conn, *bufio.Reader, int) {
	e.t.Helper()
	c := e.dialInbound(addr)
	io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"+extra)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		e.t.Fatalf("CONNECT %s: %v", target, err)
	}
	return c, br, resp.StatusCode
}

// noLocalResolve fails the test when the router would resolve a destination itself.
func noLocalResolve(t *testing.T) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		t.Errorf("the router resolved %q itself", host)
		return nil, errors.New("no local resolution in this test")
	}
}

func proxyPolicy(p *socks5test.Server, rs ...rules.Rule) Settings {
	if len(rs) == 0 {
		rs = []rules.Rule{{Name: "all", Action: rules.Proxy, Proxy: "exit"}}
	}
	return Settings{
		Decision:  decision(rs),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Addr.Port()}}},
	}
}

// TestInboundHandsTheNameToTheProxy: a name asked of either inbound reaches the upstream as a
// name, never resolved by the router; the flow is logged and shown by status like a captured
// one; bytes the client sent behind its request arrive first.
func TestInboundHandsTheNameToTheProxy(t *testing.T) {
	target := startTarget(t, "via-proxy\n")
	p := startProxy(t, map[string]netip.Addr{"echo.lab.test": target.Addr()}, nil)
	e := newEnv(t, proxyPolicy(p), Options{Resolve: noLocalResolve(t)})
	socksAddr := e.startInbound(Inbound{Name: "guest-socks", Type: InboundSOCKS5})
	httpAddr := e.startInbound(Inbound{Name: "guest-http", Type: InboundHTTP})

	c, code := e.socksConnect(socksAddr, socks5.Addr{Name: "Echo.Lab.Test.", Port: target.Port()})
	if code != 0 {
		t.Fatalf("socks5 reply %d", code)
	}
	if got := readN(t, c, 10); got != "via-proxy\n" {
		t.Fatalf("banner = %q", got)
	}
	flows := e.r.Status().Flows
	if len(flows) != 1 || flows[0].Host != "echo.lab.test" || flows[0].Dst != fmt.Sprintf("echo.lab.test:%d", target.Port()) || flows[0].Verdict.Name != "all" {
		t.Errorf("status flows = %+v; want the inbound's flow to echo.lab.test", flows)
	}
	io.WriteString(c, "ping")
	if got := readN(t, c, 4); got != "ping" {
		t.Fatalf("echo = %q", got)
	}
	c.Close()
	e.waitLog("inbound=guest-socks")

	hc, br, status := e.httpConnect(httpAddr, fmt.Sprintf("echo.lab.test:%d", target.Port()), "early")
	if status != http.StatusOK {
		t.Fatalf("CONNECT status %d", status)
	}
	got := make([]byte, 15)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "via-proxy\nearly" {
		t.Fatalf("banner and echo = %q, %v; want the early bytes delivered", got, err)
	}
	hc.Close()
	e.waitLog("inbound=guest-http")
	if got := p.Asked(); len(got) != 2 || got[0] != "echo.lab.test" || got[1] != "echo.lab.test" {
		t.Errorf("the proxy resolved %q; want echo.lab.test twice, as a name", got)
	}
	if !strings.Contains(e.logs.String(), "host=echo.lab.test") || !strings.Contains(e.logs.String(), "dst=echo.lab.test:") {
		t.Errorf("the flow's record does not name the host:\n%s", e.logs.String())
	}
}

// TestInboundDirectResolvesThroughTheProxy: a name that a direct rule takes is resolved by the
// DNS side (through the proxy), once, and the address an inbound was asked for is dialed as
// it is. (The target is on loopback: the direct rule names its address and port, which
// opens it in the host walls.)
func TestInboundDirectResolvesThroughTheProxy(t *testing.T) {
	target := startTarget(t, "direct\n")
	names := &dnstest.Names{Resolved: map[string][]netip.Addr{"model.lab.test": {target.Addr()}}}
	rule := hostRule("model", rules.Direct, "", "model.lab.test", target.Addr().String())
	rule.Ports = []rules.PortRange{{Lo: target.Port(), Hi: target.Port()}}
	e := newEnv(t, Settings{Decision: decision([]rules.Rule{rule})}, Options{Names: names, Resolve: noLocalResolve(t)})
	addr := e.startInbound(Inbound{Type: InboundSOCKS5})
	c, code := e.socksConnect(addr, socks5.Addr{Name: "model.lab.test", Port: target.Port()})
	if code != 0 {
		t.Fatalf("socks5 reply %d", code)
	}
	if got := readN(t, c, 7); got != "direct\n" {
		t.Fatalf("banner = %q", got)
	}
	c, code = e.socksConnect(addr, socks5.Addr{IP: target.Addr(), Port: target.Port()})
	if code != 0 || readN(t, c, 7) != "direct\n" {
		t.Fatalf("by address: reply %d", code)
	}
	if asked := names.Lookups(); len(asked) != 1 || asked[0] != "model.lab.test" {
		t.Errorf("resolved through the proxy: %q; want model.lab.test once", asked)
	}
}

// blockingEnv is an env for the inbounds whose rules block blocked.lab.test (rule "no") and
// send the rest to the proxy p it returns, which knows no name; port is that of a target
// that answers "x".
func blockingEnv(t *testing.T) (e *env, p *socks5test.Server, port uint16) {
	t.Helper()
	target := startTarget(t, "x")
	p = startProxy(t, map[string]netip.Addr{}, nil)
	pol := proxyPolicy(p, hostRule("no", rules.Block, "", "blocked.lab.test"), rules.Rule{Name: "all", Action: rules.Proxy, Proxy: "exit"})
	return newEnv(t, pol, Options{Resolve: noLocalResolve(t)}), p, target.Port()
}

// TestInboundRefusals: what the rules refuse, a bad request, an unsupported command and a name
// that is an address in disguise are answered in the inbound's protocol, and nothing reaches
// the upstream.
func TestInboundRefusals(t *testing.T) {
	e, p, port := blockingEnv(t)
	socksAddr := e.startInbound(Inbound{Type: InboundSOCKS5})
	httpAddr := e.startInbound(Inbound{Type: InboundHTTP})

	for _, tc := range []struct {
		name string
		dst  socks5.Addr
		want byte
	}{
		{"rule", socks5.Addr{Name: "blocked.lab.test", Port: port}, 0x02},
		// An inbound's client is caged (this machine's too): its DNS belongs to the DNS
		// server, refused by the rules.
		{"dns", socks5.Addr{IP: netip.MustParseAddr("192.0.2.53"), Port: 53}, 0x02},
		{"short ipv4", socks5.Addr{Name: "127.1", Port: port}, 0x04},
		{"hex ipv4", socks5.Addr{Name: "0x7f.0.0.1", Port: port}, 0x04},
		{"invalid tld", socks5.Addr{Name: "a.invalid", Port: port}, 0x04},
		{"bad byte", socks5.Addr{Name: "a b.test", Port: port}, 0x04},
		{"port 0", socks5.Addr{Name: "echo.lab.test", Port: 0}, 0x04},
	} {
		t.Run("socks5 "+tc.name, func(t *testing.T) {
			c, code := e.socksConnect(socksAddr, tc.dst)
			if code != tc.want {
				t.Errorf("reply %#02x; want %#02x", code, tc.want)
			}
			if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Errorf("after the refusal, read %d, %v; want the connection closed", n, err)
			}
		})
	}
	for _, tc := range []struct {
		name, target string
		want         int
	}{
		{"rule", fmt.Sprintf("blocked.lab.test:%d", port), http.StatusForbidden},
		{"short ipv4", fmt.Sprintf("127.1:%d", port), http.StatusBadRequest},
		{"no port", "echo.lab.test", http.StatusBadRequest},
		{"zone", fmt.Sprintf("[fe80::1%%25lo]:%d", port), http.StatusBadRequest},
	} {
		t.Run("http "+tc.name, func(t *testing.T) {
			if _, _, status := e.httpConnect(httpAddr, tc.target, ""); status != tc.want {
				t.Errorf("status %d; want %d", status, tc.want)
			}
		})
	}
	t.Run("http GET", func(t *testing.T) {
		c := e.dialInbound(httpAddr)
		io.WriteString(c, "GET http://echo.lab.test/ HTTP/1.1\r\nHost: echo.lab.test\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "CONNECT" {
			t.Errorf("GET: %d, Allow %q; want 405 with Allow: CONNECT", resp.StatusCode, resp.Header.Get("Allow"))
		}
	})
	t.Run("http head too large", func(t *testing.T) {
		c := e.dialInbound(httpAddr)
		go io.WriteString(c, "CONNECT echo.lab.test:80 HTTP/1.1\r\nX-Pad: "+strings.Repeat("a", inboundHeadMax)+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("status %d; want 431", resp.StatusCode)
		}
	})
	for _, cmd := range []byte{socks5.CmdBind, socks5.CmdUDPAssociate} {
		t.Run(fmt.Sprintf("socks5 command %d", cmd), func(t *testing.T) {
			c := e.dialInbound(socksAddr)
			req, _ := socks5.AppendRequest([]byte{5, 1, 0}, cmd, socks5.Addr{IP: netip.MustParseAddr("192.0.2.1"), Port: 80})
			c.Write(req)
			got := make([]byte, 4)
			if _, err := io.ReadFull(c, got); err != nil || got[1] != 0 || got[3] != 0x07 {
				t.Errorf("reply % x, %v; want method 0 then REP 07 (command not supported)", got, err)
			}
		})
	}
	if got := p.Asked(); len(got) != 0 {
		t.Errorf("the upstream was asked for %q", got)
	}
	e.waitLog("rule=no action=block")
}

// TestInboundCagesGuests: an inbound's client is caged, in a VM network or on this machine
// itself (an inbound serves guests): the host's own addresses are off limits (localhost
// included), and no direct catch-all takes it.
func TestInboundCagesGuests(t *testing.T) {
	target := startTarget(t, "model\n")
	// The loopback target stands for a service of the host, such as the model server.
	host := netip.AddrPortFrom(loopback, target.Port())
	for _, tc := range []struct {
		name   string
		vmNets []netip.Prefix
		want   byte
	}{
		{"guest", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, 0x02},
		{"this machine", nil, 0x02},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Settings{Decision: decision([]rules.Rule{{Name: "default", Action: rules.Direct}}, tc.vmNets...)}, Options{})
			addr := e.startInbound(Inbound{Type: InboundSOCKS5})
			for _, dst := range []socks5.Addr{{Name: "localhost", Port: host.Port()}, {IP: host.Addr(), Port: host.Port()}, {IP: target.Addr(), Port: target.Port()}} {
				c, code := e.socksConnect(addr, dst)
				if code != tc.want {
					t.Errorf("%v: reply %#02x; want %#02x", dst, code, tc.want)
				}
				if code == 0 {
					if got := readN(t, c, 6); got != "model\n" {
						t.Errorf("%v: banner %q", dst, got)
					}
				}
			}
			{
				// A caged client's DNS belongs to the DNS server: refused by the rules.
				if _, code := e.socksConnect(addr, socks5.Addr{IP: netip.MustParseAddr("192.0.2.53"), Port: 53}); code != 0x02 {
					t.Errorf("caged DNS: reply %#02x; want 0x02", code)
				}
			}
		})
	}
}

// TestInboundSourceNotAllowed: a source outside allow is reset at once, before any request.
func TestInboundSourceNotAllowed(t *testing.T) {
	e := newEnv(t, Settings{Decision: decision([]rules.Rule{{Name: "all", Action: rules.Direct}})}, Options{})
	for _, typ := range []InboundType{InboundSOCKS5, InboundHTTP} {
		addr := e.startInbound(Inbound{Type: typ, Allow: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			continue // reset before the dial returned
		}
		c.SetDeadline(time.Now().Add(waitFor))
		wantReset(t, c)
		c.Close()
	}
	e.waitLog("inbound refused: source not allowed")
}

// TestInboundProxyDownFailsClosed: the upstream is down: the client is told (X'01', 502), and
// nothing goes direct.
func TestInboundProxyDownFailsClosed(t *testing.T) {
	target := startTarget(t, "x")
	p := startProxy(t, nil, nil)
	p.Stop()
	e := newEnv(t, proxyPolicy(p), Options{})
	socksAddr := e.startInbound(Inbound{Type: InboundSOCKS5})
	httpAddr := e.startInbound(Inbound{Type: InboundHTTP})
	if _, code := e.socksConnect(socksAddr, socks5.Addr{IP: target.Addr(), Port: target.Port()}); code != 0x01 {
		t.Errorf("socks5 reply %#02x; want 01 (the upstream failed)", code)
	}
	if _, _, status := e.httpConnect(httpAddr, target.String(), ""); status != http.StatusBadGateway {
		t.Errorf("status %d; want 502", status)
	}
	if strings.Contains(e.logs.String(), "action=direct") {
		t.Errorf("a flow went direct:\n%s", e.logs.String())
	}
}

// TestInboundRequestCutAtStop: a client that never finishes its request is cut when the
// inbound stops, and its slot is given back.
func TestInboundRequestCutAtStop(t *testing.T) {
	e := newEnv(t, Settings{Decision: decision(nil)}, Options{})
	in := Inbound{Name: "slow", Type: InboundHTTP, Listen: netip.MustParseAddrPort("127.0.0.1:0"), Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	ln, err := e.r.ListenInbound(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.r.ServeInbound(ctx, ln, func() *Inbound { return &in }) }()
	c := e.dialInbound(netaddr.AddrPort(ln.Addr()))
	io.WriteString(c, "CONNECT echo.lab.test:443 HTTP/1.1\r\n")
	// A second client's whole request is answered: the server accepted the first one before
	// it (one listener, accepted in order) and is reading its request.
	if _, _, status := e.httpConnect(netaddr.AddrPort(ln.Addr()), "echo.lab.test:443", ""); status == 0 {
		t.Fatal("no answer to a whole request")
	}
	start := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d, %v; want the connection cut", n, err)
	}
	waitReturns(t, "Wait (the cut request counted as a running flow)", e.r.Wait)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cut after %v; want at once", d)
	}
}

func TestAdmission(t *testing.T) {
	a := newInboundAdmission(2, 3)
	x, y := netip.MustParseAddr("10.0.2.15"), netip.MustParseAddr("10.0.2.16")
	for i, tc := range []struct {
		take bool // else give
		src  netip.Addr
		want bool
	}{
		{true, x, true}, {true, x, true}, {true, x, false}, // x at its share
		{true, y, true}, {true, y, false}, // the inbound full
		{false, x, true}, {true, y, true}, {true, y, false}, // y at its share
		{false, y, true}, {false, y, true}, {true, x, true},
	} {
		if !tc.take {
			a.give("vm 10.0.2.0/24", tc.src)
			continue
		}
		if got := a.take("vm 10.0.2.0/24", tc.src); got != tc.want {
			t.Fatalf("step %d: take(%v) = %v; want %v", i, tc.src, got, tc.want)
		}
	}
	if used, _, _ := a.guests.stats(); a.n[y] != 0 || used != 2 {
		t.Errorf("counts %v, all %d", a.n, used)
	}
}

func TestTarget(t *testing.T) {
	for _, tc := range []struct {
		host, name, dst string
		err             error
	}{
		{host: "Example.COM.", name: "example.com", dst: "invalid AddrPort"},
		{host: "192.0.2.1", dst: "192.0.2.1:443"},
		{host: "::ffff:192.0.2.1", dst: "192.0.2.1:443"},
		{host: "2001:db8::1", dst: "[2001:db8::1]:443"},
		{host: "localhost", name: "localhost", dst: "127.0.0.1:443"},
		{host: "a.LOCALHOST", name: "a.localhost", dst: "127.0.0.1:443"},
		{host: "host_1.lab-2.test", name: "host_1.lab-2.test", dst: "invalid AddrPort"},
		{host: "127.1", err: errLiteralName},
		{host: "2130706433", err: errLiteralName},
		{host: "0x7f.1", err: errLiteralName},
		{host: "0--1.ipv6-literal.net", err: errLiteralName},
		{host: "x.invalid", err: errReservedName},
		{host: "fe80::1%eth0", err: errZonedAddress},
		{host: "", err: errNoDestination},
		{host: "a..b", err: errInvalidName},
		{host: "a/b", err: errInvalidName},
		{host: strings.Repeat("a", 64) + ".test", err: errInvalidName},
		{host: "127.0.0.1\x00.test", err: errInvalidName},
	} {
		rq, err := target(tc.host, 443)
		if !errors.Is(err, tc.err) {
			t.Errorf("target(%q) error %v; want %v", tc.host, err, tc.err)
			continue
		}
		if tc.err == nil && (rq.name != tc.name || rq.dst.String() != tc.dst && !(tc.dst == "invalid AddrPort" && !rq.dst.Addr().IsValid() && rq.dst.Port() == 443)) {
			t.Errorf("target(%q) = %q, %v; want %q, %s", tc.host, rq.name, rq.dst, tc.name, tc.dst)
		}
	}
	if _, err := target("example.com", 0); !errors.Is(err, errNoPort) {
		t.Errorf("port 0: %v", err)
	}
}

// FuzzReadConnect: any bytes give a destination that target accepts or an error with a
// status to answer; never a panic.
// Its seeds: testdata/fuzz/FuzzReadConnect.
func FuzzReadConnect(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		lr := &io.LimitedReader{R: strings.NewReader(string(data)), N: inboundHeadMax}
		rq, status, err := readConnect(bufio.NewReaderSize(lr, earlyMax))
		if err != nil {
			if status < 400 || status > 599 {
				t.Fatalf("error %v with status %d", err, status)
			}
			return
		}
		if rq.dst.Port() == 0 {
			t.Fatalf("accepted port 0: %+v", rq)
		}
		if rq.name == "" && !rq.dst.Addr().IsValid() {
			t.Fatalf("accepted no destination: %+v", rq)
		}
		if rq.name != "" {
			if _, err := target(rq.name, rq.dst.Port()); err != nil {
				t.Fatalf("accepted name %q that target refuses: %v", rq.name, err)
			}
		}
	})
}
