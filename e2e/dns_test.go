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

// TestDNSNoLeak plays the DNS-leak trap in both modes: the guest and a hypervisor process
// on the host resolve names, and the lab's DNS server never hears from the host's address or
// the guest's; what the guest fetches by name leaves through the proxy.
func TestDNSNoLeak(t *testing.T) {
	for _, mode := range []string{"fake-ip", "proxy"} {
		t.Run(mode, func(t *testing.T) {
			s := newScene(t, config(lab.GoSocksAddr, `mode = "`+mode+`"`))
			hostAddr := netip.MustParseAddr(lab.HostUplinkAddr)
			guestNet := netip.MustParsePrefix(lab.GuestNetwork)
			checkLog := func(what string) {
				t.Helper()
				for _, q := range s.lab.DNSLog() {
					if a := q.Source.Addr(); a == hostAddr || guestNet.Contains(a) {
						t.Errorf("%s: the DNS server heard %v", what, q)
					}
				}
			}

			// The guest resolves with its resolver (the lab DNS server, outside) and fetches.
			out, code := s.curl(s.lab.Guest(), "http://"+lab.EchoName+"/")
			if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
				t.Fatalf("guest curl by name: exit %d, %q", code, out)
			}
			checkLog("guest curl")
			if mode == "fake-ip" {
				// explain names the fake IP through the running daemon; status counts the flow.
				out, code := run(s.ctx, s.lab.Host(), routerBin, "explain", "--config", s.cfg, "--src", lab.GuestAddr, "--dst", "198.18.0.1:80")
				if code != 0 || !strings.Contains(out, "fake IP the running router gave to "+lab.EchoName) || !strings.Contains(out, `verdict: proxy via exit`) {
					t.Errorf("explain of a fake IP: exit %d\n%s", code, out)
				}
				out, code = run(s.ctx, s.lab.Host(), routerBin, "status", "--config", s.cfg)
				if code != 0 || !strings.Contains(out, "#3 vm") || !strings.Contains(out, "pool 198.18.0.0/15") {
					t.Errorf("status: exit %d\n%s", code, out)
				}
				t.Logf("router status:\n%s", out)
			}

			// dig to an outside resolver over UDP and TCP: answered by the router.
			for _, tcp := range []string{"+notcp", "+tcp"} {
				out, code := run(s.ctx, s.lab.Guest(), "dig", "+short", "+time=2", "+tries=1", tcp, "@"+lab.ServiceAddr, lab.EchoName)
				a, err := netip.ParseAddr(strings.TrimSpace(out))
				switch {
				case code != 0 || err != nil:
					t.Errorf("dig %s: exit %d, %q", tcp, code, out)
				case mode == "fake-ip" && !netip.MustParsePrefix("198.18.0.0/15").Contains(a):
					t.Errorf("dig %s: %v is not a fake IP", tcp, a)
				case mode == "proxy" && a.String() != lab.ServiceAddr:
					t.Errorf("dig %s: %v, want the real answer through the proxy", tcp, a)
				}
			}
			checkLog("guest dig")
			if mode == "proxy" {
				// The answers came through the proxy: the DNS server saw its exit address.
				seen := false
				for _, q := range s.lab.DNSLog() {
					seen = seen || q.Source.Addr().String() == lab.ExitAddr
				}
				if !seen {
					t.Errorf("proxy mode: no query reached the DNS server from the proxy's exit: %v", s.lab.DNSLog())
				}
			}

			// A hypervisor process on the host resolving through the system resolver.
			getent := s.hypervisorCopy("getent", "VBoxHeadless")
			out, code = run(s.ctx, s.lab.Host(), getent, "hosts", lab.EchoName)
			if code != 0 {
				t.Errorf("VBoxHeadless (getent) on the host: exit %d, %q", code, out)
			}
			vbox := s.hypervisorCopy("curl", "VBoxHeadless")
			out, code = run(s.ctx, s.lab.Host(), vbox, "-sS", "--max-time", "5", "http://"+lab.EchoName+"/")
			if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
				t.Errorf("VBoxHeadless (curl) by name: exit %d, %q", code, out)
			}
			checkLog("host hypervisor process")

			// DNS over TLS that a rule would send direct (a host process, default rule) is
			// blocked; the guest's goes through the proxy like the rest of its TCP.
			if out, code := s.curl(s.lab.Host(), "http://"+lab.ServiceAddr+":853/", "--max-time", "2"); code == 0 {
				t.Errorf("DoT port answered: %q", out)
			}
			s.waitLog(policy.StepDoT.String(), 5*time.Second)
			s.wantNoLeak("dns " + mode)
		})
	}
}
