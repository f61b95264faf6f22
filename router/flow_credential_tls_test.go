package router

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net/netip"
	"strconv"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/secret"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/broker"
	"github.com/agentcage/router/router/broker/tlsca"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// TestBrokeredTLS: a credential bound to an HTTPS destination with tls_terminate. The guest's
// TLS is terminated with a certificate of the router's CA for the name (HTTP/1.1 offered,
// never h2), the router's own TLS to the destination is verified with the configured roots,
// and every request of the connection reaches the server with the value; a placeholder in
// the query is the canary, answered inside the guest's TLS. With the system's roots, which do
// not know the test server's certificate, nothing reaches the server.
func TestBrokeredTLS(t *testing.T) {
	const (
		ph   = "router-placeholder-tls-9f9f9f"
		real = "REAL-tls-value-1a1a"
	)
	api := startAPITLS(t)
	addr := api.addr
	dest := "example.com:" + strconv.Itoa(int(addr.Port()))
	roots := x509.NewCertPool()
	roots.AddCert(api.cert)
	ca, err := tlsca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fake := netip.MustParseAddr("198.18.0.9")
	for _, tc := range []struct {
		name    string
		roots   *x509.CertPool
		reaches bool
	}{{"configured roots", roots, true}, {"system roots", nil, false}} {
		for _, path := range refusePaths {
			t.Run(tc.name+"/"+path.name, func(t *testing.T) {
				api.reset()
				creds := broker.New([]broker.Credential{{Name: "tls-key", Placeholder: ph, Value: secret.NewPassword(real),
					Destination: dest, Header: "Authorization", TLSTerminate: true, Roots: tc.roots}})
				cfg := &conf.Config{Rules: []rules.Rule{hostRule("api", rules.Direct, "", "example.com")},
					Capture:     conf.Capture{VMNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
					DNS:         conf.DNS{Mode: conf.DNSFakeIP, Pool: netip.MustParsePrefix("198.18.0.0/15")},
					Credentials: []conf.Credential{{Name: "tls-key", Placeholder: ph, Destination: dest, TLSTerminate: true}}}
				names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"),
					Names: map[netip.Addr]string{fake: "example.com"}, Resolved: map[string][]netip.Addr{"example.com": {addr.Addr()}}}
				e := newEnv(t, Settings{Decision: policy.New(cfg, policy.Env{}), Credentials: creds},
					Options{GoroutineSetup: path.goroutine, Names: names, TLSCA: ca})
				c := tls.Client(e.dial(netip.AddrPortFrom(fake, addr.Port())), &tls.Config{ServerName: "example.com", RootCAs: ca.Pool(), NextProtos: []string{"h2", "http/1.1"}})
				if err := c.Handshake(); err != nil {
					if tc.reaches {
						t.Fatalf("the guest's handshake: %v", err)
					}
					e.waitLog("certificate signed by unknown authority") // the router's own handshake
					api.wantSeen(t)
					return
				}
				if !tc.reaches {
					// The router may finish the guest's handshake only once its own is done.
					t.Fatal("the guest's handshake succeeded with an unverified destination")
				}
				if p := c.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
					t.Errorf("ALPN %q, want http/1.1", p)
				}
				brokeredRequests(t, c, bufio.NewReader(c), dest, ph)
				api.wantSeen(t, dest+"|Bearer "+real+"||/v1/0", dest+"|Bearer "+real+"||/v1/1")
				wait.For(t, "the canary counted", waitFor, func() bool { return e.r.book.Count(refusal.Canary) == 1 })
				e.wantNotLogged(real)
			})
		}
	}
}
