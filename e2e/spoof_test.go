//go:build linux

package e2e

import (
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/roottest"
)

// spoofAddr is an address of the lab's internet that the spoofing guest connects to: no
// name it writes resolves there.
const spoofAddr = "203.0.113.66"

// spoofConfig is the scene's config (config, with the upstream at proxy and the [dns]
// keys dns) with its rules replaced by those of testdata/spoof_rules.toml: the guest goes
// through the proxy, except by name (the README's model rule naming localhost and the
// model's port, an imported Proxifier profile's Localhost rule, a direct rule for
// *.corp.test).
func spoofConfig(t *testing.T, proxy, dns string) string {
	head, _, _ := strings.Cut(config(proxy, dns), "\n[[rule]]")
	return head + "\n" + fixture(t, "spoof_rules.toml")
}

// TestSpoofedNameNeverPicksTheAddress: a guest that writes a name a direct rule allows (an
// HTTP Host, a TLS server name) and connects to an address of its choosing never gets
// there direct: the router dials the name as its resolver resolves it, and refuses it when
// the name leads nowhere or to this host. The server at the guest's address sees nothing,
// no packet leaves the host's own address outside the proxy, and the flow log says the
// name was not trusted. A name that does resolve is dialed where it leads, not where the
// guest pointed.
func TestSpoofedNameNeverPicksTheAddress(t *testing.T) {
	roottest.Require(t, tools...)
	names := map[string]netip.Addr{"loop.corp.test": netip.MustParseAddr("127.0.0.1"), "www.corp.test": netip.MustParseAddr(lab.ServiceAddr)}
	s := newLabWith(t, spoofConfig(t, lab.DanteAddr, "")+flowLogKeys, lab.Options{Names: names})
	if out, code := run(s.ctx, s.lab.Inet(), "ip", "addr", "add", spoofAddr+"/32", "dev", "lo"); code != 0 {
		t.Fatalf("add %s in the lab's internet: %s", spoofAddr, out)
	}
	seen := map[string]*atomic.Int32{}
	for _, port := range []string{"80", "443", "22", "47831"} {
		seen[port] = s.inetService(net.JoinHostPort(spoofAddr, port), "spoofed\n")
	}
	s.startRouter()
	guest := s.lab.Guest()

	// curl, as an agent would run it.
	for _, c := range []struct {
		name string
		url  string
		args []string
	}{
		{"Host of a corp name", "http://" + spoofAddr + "/", []string{"-H", "Host: x.corp.test"}},
		{"SNI of a corp name", "https://x.corp.test/", []string{"-k", "--resolve", "x.corp.test:443:" + spoofAddr}},
		{"Host of a corp name that resolves to loopback", "http://" + spoofAddr + "/", []string{"-H", "Host: loop.corp.test"}},
		{"README: Host localhost on the model's port", "http://" + spoofAddr + ":47831/v1/models", []string{"-H", "Host: localhost:47831"}},
		{"imported Localhost: Host localhost", "http://" + spoofAddr + "/", []string{"-H", "Host: localhost"}},
	} {
		if out, code := s.curl(guest, c.url, c.args...); gotThrough(out, code) {
			t.Errorf("%s: got through: %q", c.name, out)
		}
	}
	// A ClientHello for localhost, which curl would not send to another address.
	for _, port := range []string{"47831", "22", "443"} {
		if got := tlsFromGuest(s, guest, net.JoinHostPort(spoofAddr, port), "localhost"); got != "" {
			t.Errorf("SNI localhost to port %s: got through: %q", port, got)
		}
	}
	for port, n := range seen {
		if n.Load() != 0 {
			t.Errorf("the server at %s:%s saw %d connections", spoofAddr, port, n.Load())
		}
	}
	s.wantNoLeak("spoofed names")
	for _, name := range []string{"x.corp.test", "loop.corp.test", "localhost"} {
		s.flowRecords(func(m map[string]any) bool {
			return m["event"] == "refused" && m["name"] == name && m["name_untrusted"] == true && m["reason"] == "host-off-limits"
		})
	}
	if log := s.log(); !strings.Contains(log, "name_untrusted=true") {
		t.Error("the router's log never says name_untrusted=true")
	}

	// A corp name that resolves: the router dials it where it leads (the echo server, which
	// answers the address it saw: the host's, as a direct flow), never the guest's address.
	out, code := s.curl(guest, "http://"+spoofAddr+"/", "-H", "Host: www.corp.test")
	if code != 0 || strings.TrimSpace(out) != lab.HostUplinkAddr {
		t.Errorf("Host www.corp.test to %s: exit %d, %q; want the echo server's answer %s", spoofAddr, code, out, lab.HostUplinkAddr)
	}
	if n := seen["80"].Load(); n != 0 {
		t.Errorf("the server at %s:80 saw %d connections", spoofAddr, n)
	}
	s.flowRecords(func(m map[string]any) bool {
		return m["event"] == "flow" && m["name"] == "www.corp.test" && m["name_untrusted"] == true &&
			m["dialed"] == lab.ServiceAddr+":80" && m["dst"] == spoofAddr+":80"
	})
}

// tlsFromGuest sends a ClientHello for name from the guest to address and returns what the
// server answered ("" when the connection was refused or nothing came back in time).
func tlsFromGuest(s *scene, guest *lab.Netns, address, name string) string {
	s.t.Helper()
	c, err := guest.Dial(s.ctx, "tcp", address)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		// The services here speak plain text: a handshake that got bytes back reached one.
		if strings.Contains(err.Error(), "first record does not look like a TLS handshake") {
			return "plain text from " + address
		}
		return ""
	}
	b, _ := io.ReadAll(tc)
	return "tls: " + string(b)
}

// TestSpoofHonestNameInProxyMode: an honest client in [dns] mode = "proxy" (the guest gets
// real addresses from the router's DNS) still reaches a corp name by the direct rule: the
// name its Host carries is resolved again by the router and the address the guest chose is
// one of them, so the router dials that address, and the flow log says so.
func TestSpoofHonestNameInProxyMode(t *testing.T) {
	roottest.Require(t, tools...)
	names := map[string]netip.Addr{"www.corp.test": netip.MustParseAddr(lab.ServiceAddr)}
	s := newLabWith(t, spoofConfig(t, lab.DanteAddr, "mode = \"proxy\"\n")+flowLogKeys, lab.Options{Names: names})
	s.startRouter()
	out, code := s.curl(s.lab.Guest(), "http://www.corp.test/")
	if code != 0 || strings.TrimSpace(out) != lab.HostUplinkAddr {
		t.Fatalf("http://www.corp.test/: exit %d, %q; want the echo server's answer %s (a direct flow)", code, out, lab.HostUplinkAddr)
	}
	s.flowRecords(func(m map[string]any) bool {
		return m["event"] == "flow" && m["name"] == "www.corp.test" && m["rule"] == "corp" &&
			m["dialed"] == lab.ServiceAddr+":80" && m["dst"] == lab.ServiceAddr+":80"
	})
}
