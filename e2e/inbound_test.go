//go:build linux

package e2e

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
)

// inbounds are the scene's explicit proxies on the VM-facing address, for the guest only.
const inbounds = `
[[inbound]]
name = "guest-socks"
listen = "10.0.2.2:1080"
allow = ["10.0.2.15/32"]

[[inbound]]
name = "guest-http"
type = "http"
listen = "10.0.2.2:3128"
allow = ["10.0.2.15/32"]
`

// TestInbound: a guest pointed at the explicit proxies (curl --socks5-hostname, curl
// --proxy http:// with a CONNECT tunnel) leaves through the upstream with its exit address,
// the name handed on unresolved (the DNS server never hears the guest or the host); the
// flows are decided by the same rules and logged like captured ones. A source outside allow
// and the internet side are refused; plain-HTTP proxying is answered 405; the host's own
// services stay out of reach through the proxy too.
func TestInbound(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, inbounds))
	s.lab.ResetLogs()
	socks := []string{"--socks5-hostname", "10.0.2.2:1080"}
	web := []string{"--proxytunnel", "--proxy", "http://10.0.2.2:3128"}
	for _, tc := range []struct {
		name, inbound string
		args          []string
	}{{"socks5", "guest-socks", socks}, {"http", "guest-http", web}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, url := range []string{"http://" + lab.EchoName + "/", lab.EchoURL} {
				out, code := s.curl(s.lab.Guest(), url, tc.args...)
				if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
					t.Fatalf("%s through the %s inbound: exit %d, %q; want the proxy's exit %s", url, tc.name, code, out, lab.ExitAddr)
				}
			}
			s.waitLog("host=echo.lab.test inbound="+tc.inbound+" proxy=exit", 5*time.Second)
		})
	}
	for _, r := range s.lab.HTTPLog() {
		if r.Remote.Addr().String() != lab.ExitAddr {
			t.Errorf("the echo server saw %v", r)
		}
	}
	for _, q := range s.lab.DNSLog() {
		if a := q.Source.Addr().String(); a == lab.GuestAddr || a == lab.HostUplinkAddr || a == lab.GatewayAddr {
			t.Errorf("the DNS server heard %v", q)
		}
	}
	if !strings.Contains(s.log(), "rule=vm action=proxy") {
		t.Errorf("the inbound's flows were not decided by the VM's rule:\n%s", s.log())
	}
	s.wantNoLeak("inbound")

	// Plain-HTTP proxying is not offered: 405, and nothing leaves.
	s.lab.ResetLogs()
	out, code := s.curl(s.lab.Guest(), lab.EchoURL, "--proxy", "http://10.0.2.2:3128", "-o", "/dev/null", "-w", "%{http_code}")
	if code != 0 || out != "405" {
		t.Errorf("GET through the http inbound: exit %d, %q; want 405", code, out)
	}
	if n := len(s.lab.HTTPLog()); n != 0 {
		t.Errorf("the echo server heard %d requests from a refused GET", n)
	}

	// The host is off limits through the inbound as well: a service on its loopback.
	reached := s.hostService("127.0.0.1:2222", "host service\n")
	for _, args := range [][]string{socks, web} {
		for _, url := range []string{"http://localhost:2222/", "http://127.0.0.1:2222/"} {
			if out, code := s.curl(s.lab.Guest(), url, args...); code == 0 || strings.Contains(out, "host service") {
				t.Errorf("%s through %v: exit %d, %q; want refused", url, args, code, out)
			}
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the host's loopback service was reached %d times through the inbound", n)
	}

	// Sources outside allow: another guest address, and the internet side.
	if out, code := run(s.ctx, s.lab.Guest(), "ip", "addr", "add", "10.0.2.16/24", "dev", lab.GuestDev); code != 0 {
		t.Fatalf("add address: %s", out)
	}
	for _, args := range [][]string{socks, web} {
		a := append([]string{"--interface", "10.0.2.16", "--max-time", "2"}, args...)
		if out, code := s.curl(s.lab.Guest(), lab.EchoURL, a...); code == 0 {
			t.Errorf("a guest source outside allow used %v: %q", args, out)
		}
	}
	s.wantNoLeak("inbound refusals")
	// From the internet side, routed to the VM-facing address.
	if out, code := run(s.ctx, s.lab.Inet(), "ip", "route", "add", lab.GatewayAddr+"/32", "via", lab.HostUplinkAddr); code != 0 {
		t.Fatalf("route: %s", out)
	}
	for _, addr := range []string{"10.0.2.2:1080", "10.0.2.2:3128"} {
		c, err := s.lab.Inet().Dial(s.ctx, "tcp", addr)
		if err == nil {
			c.Close()
			t.Errorf("the internet side connected to %s", addr)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("the internet side to %s: %v; want refused at once", addr, err)
		}
	}
	// The guard refused them all: none reached the inbound's own check.
	if strings.Contains(s.log(), "inbound refused: source not allowed") {
		t.Errorf("an unallowed source reached the inbound's server: the guard let it through:\n%s", s.log())
	}
}
