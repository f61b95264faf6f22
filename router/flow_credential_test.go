package router

import (
	"bufio"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/internal/secret"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/broker"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/socks5"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// apiServer is an HTTP server on loopback that records what each request's Authorization,
// X-Other and Host held, and answers "ok" (keep-alive).
type apiServer struct {
	addr netip.AddrPort    // its public alias
	cert *x509.Certificate // over HTTPS, its certificate (for example.com); else nil
	mu   sync.Mutex
	seen []string // "Host|Authorization|X-Other|URI"
}

// startAPI starts an apiServer over plain HTTP.
func startAPI(t *testing.T) *apiServer { return serveAPI(t, false) }

// startAPITLS starts an apiServer over HTTPS, with httptest's certificate for example.com.
func startAPITLS(t *testing.T) *apiServer { return serveAPI(t, true) }

func serveAPI(t *testing.T, overTLS bool) *apiServer {
	t.Helper()
	a := &apiServer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		a.mu.Lock()
		a.seen = append(a.seen, req.Host+"|"+req.Header.Get("Authorization")+"|"+req.Header.Get("X-Other")+"|"+req.RequestURI)
		a.mu.Unlock()
		io.WriteString(w, "ok")
	}))
	srv.Config.ReadHeaderTimeout = waitFor
	if overTLS {
		srv.StartTLS()
		a.cert = srv.Certificate()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	a.addr = public(netaddr.AddrPort(srv.Listener.Addr()))
	return a
}

func (a *apiServer) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// reset forgets the requests seen so far (a subtest's start).
func (a *apiServer) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = nil
}

// wantSeen fails t unless the server saw exactly want, in order.
func (a *apiServer) wantSeen(t *testing.T, want ...string) {
	t.Helper()
	if got := a.requests(); !slices.Equal(got, want) {
		t.Errorf("the server saw:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// brokeredRequests sends, on one connection to a brokered destination (host, the Host
// field), two requests with ph in Authorization, each of which must be answered "ok", then
// a third with ph in its query, which must get the canary's 403.
func brokeredRequests(t *testing.T, c io.Writer, br *bufio.Reader, host, ph string) {
	t.Helper()
	for i := range 2 {
		req := "GET /v1/" + strconv.Itoa(i) + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + ph + "\r\n\r\n"
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("request %d: %s %q", i, resp.Status, body)
		}
	}
	io.WriteString(c, "GET /v1/x?key="+ph+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	want403(t, br, true)
}

// wantNotLogged fails the test when the router's log holds value.
func (e *env) wantNotLogged(value string) {
	e.t.Helper()
	if strings.Contains(e.logs.String(), value) {
		e.t.Errorf("the value was logged:\n%s", e.logs.String())
	}
}

// brokered is an API server (startAPI) and the credential "api-key" brokered to it.
type brokered struct {
	api   *apiServer
	port  uint16          // the server's
	dest  string          // the credential's destination: api.lab.test:port
	cred  conf.Credential // as configured
	creds *broker.Broker  // as brokered
}

// brokeredAPI starts an API server and brokers the credential "api-key" to it: the
// placeholder ph stands for real on the way to the server by the name api.lab.test (in the
// header only, when header is not empty).
func brokeredAPI(t *testing.T, ph, real, header string) brokered {
	t.Helper()
	b := brokered{api: startAPI(t)}
	b.port = b.api.addr.Port()
	b.dest = "api.lab.test:" + strconv.Itoa(int(b.port))
	b.cred = conf.Credential{Name: "api-key", Placeholder: ph, Destination: b.dest}
	b.creds = broker.New([]broker.Credential{{Name: "api-key", Placeholder: ph, Value: secret.NewPassword(real), Destination: b.dest, Header: header}})
	return b
}

// TestBrokeredDestination: a caged flow to a destination a credential is bound to (by the
// name behind its fake IP), direct or through the proxy, on both set-up paths: every request
// of a keep-alive connection reaches the server with the real value in place of the
// placeholder; a request whose Host names another site, that carries the placeholder in its
// query or in another header than the credential's, is refused with the router's 403 and
// counted as canary, and never reaches the server. The same placeholder to another name is
// the canary of the first bytes. No log holds the value.
func TestBrokeredDestination(t *testing.T) {
	const (
		ph   = "router-placeholder-api-5b5b5b"
		real = "REAL-api-value-6c6c"
	)
	b := brokeredAPI(t, ph, real, "Authorization")
	attacker := startTarget(t, "") // an echo: the router's 403 is all the client may read
	apiFake, otherFake := netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("198.18.0.8")
	proxy := startProxy(t, map[string]netip.Addr{"api.lab.test": b.api.addr.Addr(), "other.lab.test": b.api.addr.Addr()}, nil)
	for _, act := range []rules.Action{rules.Direct, rules.Proxy} {
		for _, path := range refusePaths {
			t.Run(act.String()+"/"+path.name, func(t *testing.T) {
				b.api.reset()
				cfg := &conf.Config{Rules: []rules.Rule{hostRule("labs", act, map[bool]string{true: "exit"}[act == rules.Proxy], "*.lab.test")},
					Capture:     conf.Capture{VMNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
					DNS:         conf.DNS{Mode: conf.DNSFakeIP, Pool: netip.MustParsePrefix("198.18.0.0/15")},
					Credentials: []conf.Credential{b.cred}}
				names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"),
					Names:    map[netip.Addr]string{apiFake: "api.lab.test", otherFake: "other.lab.test"},
					Resolved: map[string][]netip.Addr{"api.lab.test": {b.api.addr.Addr()}, "other.lab.test": {b.api.addr.Addr()}}}
				s := Settings{Decision: policy.New(cfg, policy.Env{}), Credentials: b.creds}
				if act == rules.Proxy {
					s.Upstreams = []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: proxy.Addr.Port()}}}
				}
				e := newEnv(t, s, Options{GoroutineSetup: path.goroutine, Names: names})

				// Keep-alive: both requests get the value; the third is refused.
				c := e.dial(netip.AddrPortFrom(apiFake, b.port))
				brokeredRequests(t, c, bufio.NewReader(c), b.dest, ph)
				b.api.wantSeen(t, b.dest+"|Bearer "+real+"||/v1/0", b.dest+"|Bearer "+real+"||/v1/1")

				// Refused at the first request, never at the server: the placeholder in
				// another header, the placeholder to another name (the canary); a Host naming
				// another site (the policy: the name disagrees with the fake IP's).
				for _, tc := range []struct {
					dst    netip.Addr
					first  string
					canary bool
				}{
					{apiFake, "GET / HTTP/1.1\r\nHost: " + b.dest + "\r\nX-Other: " + ph + "\r\n\r\n", true},
					{otherFake, "GET / HTTP/1.1\r\nHost: other.lab.test:" + strconv.Itoa(int(b.port)) + "\r\nAuthorization: Bearer " + ph + "\r\n\r\n", true},
					{apiFake, "GET / HTTP/1.1\r\nHost: attacker.lab.test\r\nAuthorization: Bearer " + ph + "\r\n\r\n", false},
				} {
					c := e.dial(netip.AddrPortFrom(tc.dst, b.port))
					io.WriteString(c, tc.first)
					want403(t, bufio.NewReader(c), tc.canary)
				}
				// A Host naming the API at an address the guest chose (agentcage#175): the
				// canary of the first bytes, never the value, and the attacker sees nothing.
				c = e.dial(attacker)
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+b.dest+"\r\nAuthorization: Bearer "+ph+"\r\n\r\n")
				want403(t, bufio.NewReader(c), true)
				wait.For(t, "the canaries counted", waitFor, func() bool { return e.r.book.Count(refusal.Canary) == 4 })
				if got := b.api.requests(); len(got) != 2 {
					t.Errorf("the server saw %d requests, want the 2 brokered ones: %q", len(got), got)
				}
				e.wantNotLogged(real)
			})
		}
	}
}

// want403 reads the router's refusal from br: the canary's, naming the placeholder, or
// another.
func want403(t *testing.T, br *bufio.Reader, canary bool) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "placeholder") != canary {
		t.Fatalf("answer %s %q; want the router's 403 (naming the placeholder: %v)", resp.Status, body, canary)
	}
}

// TestBrokeredInbound: through a SOCKS5 inbound asked for the bound name, the request gets
// the value; one whose Host names another site on the same connection (a shared front that
// routes by Host) is the canary, and reaches no server.
func TestBrokeredInbound(t *testing.T) {
	const (
		ph   = "router-placeholder-api-7d7d7d"
		real = "REAL-api-value-8e8e"
	)
	b := brokeredAPI(t, ph, real, "")
	names := &dnstest.Names{Resolved: map[string][]netip.Addr{"api.lab.test": {b.api.addr.Addr()}}}
	rule := hostRule("api", rules.Direct, "", "api.lab.test", b.api.addr.Addr().String())
	cfg := &conf.Config{Rules: []rules.Rule{rule}, Credentials: []conf.Credential{b.cred}}
	e := newEnv(t, Settings{Decision: policy.New(cfg, policy.Env{}), Credentials: b.creds}, Options{Names: names, Resolve: noLocalResolve(t)})
	addr := e.startInbound(Inbound{Type: InboundSOCKS5})
	for _, tc := range []struct {
		host  string
		value bool
	}{{b.dest, true}, {"attacker.example", false}} {
		c, code := e.socksConnect(addr, socks5.Addr{Name: "api.lab.test", Port: b.port})
		if code != 0 {
			t.Fatalf("socks5 reply %d", code)
		}
		io.WriteString(c, "GET /v1 HTTP/1.1\r\nHost: "+tc.host+"\r\nX-Other: "+ph+"\r\n\r\n")
		br := bufio.NewReader(c)
		if !tc.value {
			want403(t, br, true)
			continue
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("the brokered request: %v %v", resp, err)
		}
	}
	if got := b.api.requests(); len(got) != 1 || got[0] != b.dest+"||"+real+"|/v1" {
		t.Errorf("the server saw %q; want the one request with the value in X-Other", got)
	}
	wait.For(t, "the canary counted", waitFor, func() bool { return e.r.book.Count(refusal.Canary) == 1 })
	e.wantNotLogged(real)
}
