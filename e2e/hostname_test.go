//go:build linux

package e2e

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/rules/policy"
)

// TestNameToHostThroughLocalProxy: the upstream runs on the host (go-socks5 on 127.0.0.1, as
// an `ssh -D` or tor would), so a name the proxy resolves to 127.0.0.1 would lead the guest
// to the host's loopback-only services. The guest's flow to such a name's fake IP is
// refused and the host's loopback service hears nothing; a public name still goes through
// that proxy; an IP literal asked as a name gets no fake IP.
func TestNameToHostThroughLocalProxy(t *testing.T) {
	cfg := strings.Replace(config(lab.HostSocksAddr, ""), "local = true", "local = false", 1)
	s := newLab(t, cfg)
	if err := s.lab.StartHostSocks(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.startRouter()
	accepted := s.hostService("127.0.0.1:8081", "HTTP/1.0 200 OK\r\n\r\nhost loopback service\n")

	// The guest's resolver (the lab DNS, captured) hands out a fake IP for the name.
	out, code := run(s.ctx, s.lab.Guest(), "dig", "+short", "+time=2", "+tries=1", "@"+lab.ServiceAddr, lab.LoopName)
	fake, err := netip.ParseAddr(strings.TrimSpace(out))
	if code != 0 || err != nil || !netip.MustParsePrefix("198.18.0.0/15").Contains(fake) {
		t.Fatalf("dig %s: exit %d, %q; want a fake IP", lab.LoopName, code, out)
	}
	start := time.Now()
	out, code = s.curl(s.lab.Guest(), "http://"+lab.LoopName+":8081/")
	if gotThrough(out, code) || strings.Contains(out, "host loopback service") {
		t.Errorf("the guest reached the host's loopback service through the local proxy: exit %d, %q", code, out)
	}
	t.Logf("curl %s:8081: exit %d after %v", lab.LoopName, code, time.Since(start).Round(time.Millisecond))
	time.Sleep(50 * time.Millisecond) // not ordering: a window for an accept that must not come; no event says none will
	if n := accepted.Load(); n != 0 {
		t.Errorf("the host's loopback service accepted %d connections", n)
	}
	s.waitLog(policy.StepHostName.String(), 2*time.Second)

	// A public name goes through the same proxy (it connects from the host's address).
	if out, code := s.curl(s.lab.Guest(), "http://"+lab.EchoName+"/"); code != 0 || strings.TrimSpace(out) != lab.HostUplinkAddr {
		t.Errorf("public name through the local proxy: exit %d, %q; want the host's uplink address", code, out)
	}

	// An address literal asked as a name gets no fake IP.
	for _, q := range []string{"127.0.0.1", "127.0.0.1.", "::1"} {
		out, _ := run(s.ctx, s.lab.Guest(), "dig", "+short", "+time=2", "+tries=1", "@"+lab.ServiceAddr, q)
		for _, line := range strings.Fields(out) {
			if a, err := netip.ParseAddr(line); err == nil && netip.MustParsePrefix("198.18.0.0/15").Contains(a) {
				t.Errorf("dig %s got the fake IP %v", q, a)
			}
		}
	}
}
