//go:build linux

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/roottest"
)

// namesConfig allows the guest allowed.test and nothing else: one rule that allows by name,
// and the host's own catch-all (which never decides a caged flow).
func namesConfig(proxy string) string {
	return fmt.Sprintf(`
[proxy.exit]
address = %q

[capture]
vm_networks = ["10.0.2.0/24"]
local = true

[dns]
resolver = "203.0.113.10:53"

[relay]
connect_timeout = "3s"

[[rule]]
name = "allowed"
hosts = ["allowed.test"]
action = "proxy"

[[rule]]
name = "default"
action = "direct"
`, proxy)
}

// tlsSeen is what the "outside" TLS server saw: one entry per connection it accepted, the
// server name the client asked for ("" for none), and the peer.
type tlsSeen struct {
	mu    sync.Mutex
	conns []string
}

func (s *tlsSeen) add(c string) {
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
}

func (s *tlsSeen) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.conns...)
}

// startTLSTarget serves HTTPS on address in the lab's internet with a self-signed
// certificate for every name; each accepted connection is recorded (its SNI and peer), and
// each request is answered with the peer's address.
func startTLSTarget(t *testing.T, ctx context.Context, ns *lab.Netns, address string) *tlsSeen {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lab"},
		DNSNames: []string{"allowed.test", "denied.test"}, IPAddresses: []net.IP{net.ParseIP(lab.ServiceAddr)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	seen := &tlsSeen{}
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			seen.add(fmt.Sprintf("sni=%q from %s", h.ServerName, h.Conn.RemoteAddr()))
			return nil, nil
		}}
	ln, err := ns.Listen(ctx, "tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{TLSConfig: cfg, ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			fmt.Fprintln(w, host)
		})}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return seen
}

// TestNamesAllowList: with a config that allows only allowed.test, the guest gets through
// the proxy by the name our DNS gave, by the TLS server name to an address it resolved
// itself (curl --resolve), and by the HTTP Host header to the bare address; denied.test by
// each of the same ways, a bare address over HTTPS without a server name, and a server name
// that disagrees with the fake IP's name are refused, and the outside sees none of them.
func TestNamesAllowList(t *testing.T) {
	roottest.Require(t, tools...)
	target := netip.MustParseAddr(lab.ServiceAddr) // allowed.test and denied.test share it, as on a CDN
	s := newLabWith(t, namesConfig(lab.DanteAddr)+flowLogKeys, lab.Options{Names: map[string]netip.Addr{"allowed.test": target, "denied.test": target}})
	seen := startTLSTarget(t, s.ctx, s.lab.Inet(), lab.ServiceAddr+":443")
	s.startRouter()
	guest := s.lab.Guest()

	// The fake IP our DNS gives allowed.test, for the flow that pins it and asks for another name.
	out, code := run(s.ctx, guest, "dig", "+short", "+time=2", "+tries=1", "@"+lab.ServiceAddr, "allowed.test")
	fake, err := netip.ParseAddr(strings.TrimSpace(out))
	if code != 0 || err != nil || !netip.MustParsePrefix("198.18.0.0/15").Contains(fake) {
		t.Fatalf("dig allowed.test: exit %d, %q; want a fake IP", code, out)
	}
	pinned := "--resolve"
	allowed := []struct {
		name string
		url  string
		args []string
	}{
		{"by our DNS's name", "https://allowed.test/", nil},
		{"by SNI to a resolved address", "https://allowed.test/", []string{pinned, "allowed.test:443:" + lab.ServiceAddr}},
		{"by Host to the bare address", "http://" + lab.ServiceAddr + "/", []string{"-H", "Host: allowed.test"}},
	}
	for _, c := range allowed {
		out, code := s.curl(guest, c.url, append([]string{"-k"}, c.args...)...)
		if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
			t.Errorf("allowed %s: exit %d, %q; want the proxy's exit address %s", c.name, code, out, lab.ExitAddr)
		}
	}
	wantTLS, wantHTTP := len(seen.snapshot()), len(s.lab.HTTPLog())
	if wantTLS != 2 || wantHTTP != 1 {
		t.Errorf("the outside saw %d TLS connections (%q) and %d HTTP requests, want 2 and 1", wantTLS, seen.snapshot(), wantHTTP)
	}

	refused := []struct {
		name string
		url  string
		args []string
	}{
		{"denied by our DNS's name", "https://denied.test/", nil},
		{"denied by SNI to a resolved address", "https://denied.test/", []string{pinned, "denied.test:443:" + lab.ServiceAddr}},
		{"denied by Host to the bare address", "http://" + lab.ServiceAddr + "/", []string{"-H", "Host: denied.test"}},
		{"a bare address over HTTPS, no SNI", "https://" + lab.ServiceAddr + "/", nil},
		{"SNI other than the fake IP's name", "https://denied.test/", []string{pinned, "denied.test:443:" + fake.String()}},
		{"Host other than the fake IP's name", "http://" + fake.String() + "/", []string{"-H", "Host: denied.test"}},
	}
	for _, c := range refused {
		out, code := s.curl(guest, c.url, append([]string{"-k"}, c.args...)...)
		if gotThrough(out, code) {
			t.Errorf("%s: got through: %q", c.name, out)
		}
	}
	if got := seen.snapshot(); len(got) != wantTLS {
		t.Errorf("the outside saw refused TLS connections: %q", got[wantTLS:])
	}
	if got := s.lab.HTTPLog(); len(got) != wantHTTP {
		t.Errorf("the outside saw refused HTTP requests: %v", got[wantHTTP:])
	}
	s.wantNoLeak("names")

	// The flow log: the allowed flows with their names, where each came from, the rule and
	// the bytes; the refused ones with their reason.
	for _, from := range []string{"dns", "sni", "host"} {
		s.flowRecords(func(m map[string]any) bool {
			up, _ := m["up"].(float64)
			down, _ := m["down"].(float64)
			return m["event"] == "flow" && m["name"] == "allowed.test" && m["name_from"] == from &&
				m["rule"] == "allowed" && m["action"] == "proxy" && up > 0 && down > 0
		})
	}
	for _, want := range []struct{ name, reason string }{{"denied.test", "caged-no-rule"}, {"allowed.test", "name-mismatch"}, {"", "caged-no-rule"}} {
		s.flowRecords(func(m map[string]any) bool {
			name, _ := m["name"].(string)
			return m["event"] == "refused" && name == want.name && m["reason"] == want.reason
		})
	}
	log := s.log()
	for _, want := range []string{"name_from=dns", "name_from=sni", "name_from=host", "(name disagrees with the fake IP's)", "(caged: no rule decides)"} {
		if !strings.Contains(log, want) {
			t.Errorf("the router's log never says %q", want)
		}
	}
}
