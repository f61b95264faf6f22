package proxycheck_test

// Loopback tests: a go-socks5 server and httpconnecttest's CONNECT proxy on 127.0.0.1,
// an IP-echo HTTP server and a DNS server (TCP) behind them. The echo's host name,
// "echo.test", exists only in the proxies' own resolution, the way a real echo's name
// resolves at the proxy and not on a caged host.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/cmd/router/proxycheck"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/httpconnect/httpconnecttest"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
)

const (
	user     = "agent"
	password = "proxycheck-Secret-17"
	exitIP   = "192.0.2.77" // what the echo answers; never dialled
	echoName = "echo.test"
)

// loopbackDial dials loopback only; echoName is 127.0.0.1.
func loopbackDial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host == echoName {
		host = "127.0.0.1"
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.IsLoopback() {
		return nil, fmt.Errorf("test dials loopback only, not %q", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort(host, port))
}

func startSOCKS(t *testing.T, creds bool) netip.AddrPort {
	t.Helper()
	o := socks5test.Options{Dial: loopbackDial, Resolve: func(_ context.Context, name string) (netip.Addr, error) {
		if name == echoName || name == "localhost" {
			return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
		}
		return netip.Addr{}, fmt.Errorf("no such name %q in the test", name)
	}}
	if creds {
		o.Credentials = map[string]string{user: password}
	}
	return socks5test.Start(t, o).Addr
}

// startEcho answers every GET with the exit address in plain text.
func startEcho(t *testing.T) netip.AddrPort {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, exitIP)
	}))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
}

// startDNS answers A queries for echoName over TCP.
func startDNS(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dns listen: %v", err)
	}
	mux := mdns.NewServeMux()
	mux.HandleFunc(".", func(w mdns.ResponseWriter, q *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(q)
		if len(q.Question) == 1 && q.Question[0].Name == echoName+"." {
			m.Answer = append(m.Answer, &mdns.A{
				Hdr: mdns.RR_Header{Name: q.Question[0].Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60},
				A:   net.IPv4(127, 0, 0, 1),
			})
		} else {
			m.Rcode = mdns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	srv := &mdns.Server{Listener: ln, Handler: mux}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.ActivateAndServe() })
	t.Cleanup(func() {
		_ = srv.Shutdown()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

func check(t *testing.T, cfg upstream.Config, echo netip.AddrPort, resolver string) *proxycheck.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return proxycheck.Check(ctx, cfg, proxycheck.Options{
		Dial:     loopbackDial,
		Echo:     []string{fmt.Sprintf("http://%s:%d/", echoName, echo.Port())},
		Resolver: resolver,
		Timeout:  5 * time.Second,
	})
}

func steps(r *proxycheck.Report) string {
	var b strings.Builder
	for _, s := range r.Steps {
		state := "ok"
		switch {
		case s.Skip:
			state = "skip"
		case !s.OK:
			state = "FAIL"
		}
		fmt.Fprintf(&b, "%s=%s ", s.Name, state)
	}
	return strings.TrimSpace(b.String())
}

// noPassword fails the test when the password shows anywhere in the report.
func noPassword(t *testing.T, r *proxycheck.Report) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), password) {
		t.Errorf("the report shows the password: %s", b)
	}
}

func TestCheck(t *testing.T) {
	echo := startEcho(t)
	dnsAddr := startDNS(t).String()
	socksOpen := startSOCKS(t, false)
	socksAuth := startSOCKS(t, true)
	httpAuth := httpconnecttest.Start(t, httpconnecttest.Options{Username: user, Password: password, Dial: loopbackDial})

	cfg := func(name string, typ upstream.Type, ap netip.AddrPort, u, p string) upstream.Config {
		return upstream.Config{Name: name, Type: typ, Host: ap.Addr().String(), Port: ap.Port(), Username: u, Password: p}
	}
	// A port nobody listens on: take one and close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()

	tests := []struct {
		name     string
		cfg      upstream.Config
		resolver string
		want     string // the steps
		ok       bool
		errHas   string
	}{
		{"socks5 without credentials", cfg("open", "", socksOpen, "", ""), dnsAddr,
			"reach=ok auth=ok exit=ok dns=ok", true, ""},
		{"socks5 with credentials", cfg("auth", upstream.SOCKS5, socksAuth, user, password), dnsAddr,
			"reach=ok auth=ok exit=ok dns=ok", true, ""},
		{"socks5 wrong password", cfg("auth", upstream.SOCKS5, socksAuth, user, password+"x"), dnsAddr,
			"reach=ok auth=FAIL", false, "auth: the proxy refused the credentials"},
		{"socks5 asks for credentials none given", cfg("auth", upstream.SOCKS5, socksAuth, "", ""), dnsAddr,
			"reach=ok auth=FAIL", false, "auth:"},
		{"http with credentials", cfg("web", upstream.HTTP, httpAuth.Addr, user, password), dnsAddr,
			"reach=ok auth=ok exit=ok dns=ok", true, ""},
		{"http wrong password", cfg("web", upstream.HTTP, httpAuth.Addr, user, "nope"+password), dnsAddr,
			"reach=ok auth=FAIL", false, "auth: the proxy refused the credentials"},
		{"no resolver", cfg("open", "", socksOpen, "", ""), "",
			"reach=ok auth=ok exit=ok dns=skip", true, ""},
		{"proxy down", cfg("down", "", dead, user, password), dnsAddr,
			"reach=FAIL auth=skip", false, "reach:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := check(t, tt.cfg, echo, tt.resolver)
			noPassword(t, r)
			if got := steps(r); got != tt.want {
				t.Errorf("steps = %q, want %q (error %q)", got, tt.want, r.Error)
			}
			if r.OK() != tt.ok {
				t.Errorf("OK() = %v, want %v (error %q)", r.OK(), tt.ok, r.Error)
			}
			if !strings.Contains(r.Error, tt.errHas) {
				t.Errorf("error %q does not contain %q", r.Error, tt.errHas)
			}
			if tt.ok && r.Exit != exitIP {
				t.Errorf("exit = %q, want %q", r.Exit, exitIP)
			}
			if tt.ok && r.Latency <= 0 {
				t.Errorf("latency = %v, want > 0", r.Latency)
			}
		})
	}
}

// The echo that answers first wins; one that is down or answers no address is skipped.
func TestCheckEchoFallback(t *testing.T) {
	echo := startEcho(t)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "<html>no address here</html>")
	}))
	t.Cleanup(bad.Close)
	socksOpen := startSOCKS(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := proxycheck.Check(ctx, upstream.Config{Name: "open", Host: "127.0.0.1", Port: socksOpen.Port()}, proxycheck.Options{
		Dial:    loopbackDial,
		Echo:    []string{bad.URL + "/", fmt.Sprintf("http://127.0.0.1:%d/ip", echo.Port())},
		Timeout: 5 * time.Second,
	})
	if !r.OK() || r.Exit != exitIP {
		t.Fatalf("report = %+v, want ok with exit %s", r, exitIP)
	}
}

func TestCheckNeedsEcho(t *testing.T) {
	socksOpen := startSOCKS(t, false)
	r := proxycheck.Check(context.Background(), upstream.Config{Name: "open", Host: "127.0.0.1", Port: socksOpen.Port()},
		proxycheck.Options{Dial: loopbackDial, Timeout: time.Second})
	if r.OK() || !strings.Contains(r.Error, "no echo URL") {
		t.Fatalf("error = %q, want no echo URL", r.Error)
	}
}
