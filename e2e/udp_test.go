//go:build linux

package e2e

import (
	"context"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
)

// udpScene builds the lab with the UDP-capable go-socks5 and starts the router with cfg.
func udpScene(t *testing.T, cfg string) *scene {
	t.Helper()
	s := newLab(t, cfg)
	if err := s.lab.StartGoSocksUDP(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.startRouter()
	return s
}

// udpEcho sends a datagram from ns to dst and returns the echo's answer (the address it
// saw), trying three times.
func (s *scene) udpEcho(ns *lab.Netns, dst string) (string, error) {
	s.t.Helper()
	var err error
	for range 3 {
		var out string
		if out, err = udpExchange(s.ctx, ns, dst, 2*time.Second); err == nil {
			return out, nil
		}
	}
	return "", err
}

func udpExchange(ctx context.Context, ns *lab.Netns, dst string, wait time.Duration) (string, error) {
	c, err := ns.Dial(ctx, "udp", dst)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte("ping")); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// fakeIP asks the router's DNS (from the guest) for name and returns the fake address.
func (s *scene) fakeIP(name string) string {
	s.t.Helper()
	out, code := run(s.ctx, s.lab.Guest(), "dig", "+short", "+time=2", "+tries=2", "@"+lab.ServiceAddr, name, "A")
	a, err := netip.ParseAddr(strings.TrimSpace(out))
	if code != 0 || err != nil || !netip.MustParsePrefix("198.18.0.0/15").Contains(a) {
		s.t.Fatalf("dig %s from the guest: exit %d, %q; want a fake IP", name, code, out)
	}
	return a.String()
}

// wantExit checks that an echo answer is the proxy's exit address.
func wantExit(t *testing.T, what, got string) {
	t.Helper()
	ap, err := netip.ParseAddrPort(got)
	if err != nil || ap.Addr().String() != lab.ExitAddr {
		t.Errorf("%s: the echo saw %q, want the proxy's exit %s", what, got, lab.ExitAddr)
	}
}

// TestGuestUDPThroughTheProxy: the guest's UDP leaves through the proxy's UDP ASSOCIATE, by
// address and by fake-IP name, through go-socks5 and dante; nothing leaves otherwise.
func TestGuestUDPThroughTheProxy(t *testing.T) {
	for _, up := range []struct{ name, addr string }{{"go-socks5", lab.GoSocksUDPAddr}, {"dante", lab.DanteAddr}} {
		t.Run(up.name, func(t *testing.T) {
			s := udpScene(t, config(up.addr, ""))
			got, err := s.udpEcho(s.lab.Guest(), lab.UDPEchoAddr)
			if err != nil {
				t.Fatalf("udp by address: %v", err)
			}
			wantExit(t, "by address", got)
			fake := s.fakeIP(lab.EchoName)
			got, err = s.udpEcho(s.lab.Guest(), fake+":7")
			if err != nil {
				t.Fatalf("udp by name (%s): %v", fake, err)
			}
			wantExit(t, "by name", got)
			for _, p := range s.lab.UDPLog() {
				if p.Source.Addr().String() != lab.ExitAddr {
					t.Errorf("the udp echo saw %v", p)
				}
			}
			// The name went to the proxy, which resolved it: the lab DNS heard nobody but the
			// internet side (the proxies resolve from inet's own addresses).
			for _, q := range s.lab.DNSLog() {
				if a := q.Source.Addr().String(); a == lab.HostUplinkAddr || strings.HasPrefix(a, "10.0.2.") {
					t.Errorf("the lab DNS was asked by %v", q)
				}
			}
			s.wantNoLeak("guest UDP")
		})
	}
}

// TestGuestUDPRefusedAssociation: an upstream that refuses UDP ASSOCIATE (the lab's first
// go-socks5) leaves the guest's UDP unanswered: nothing reaches the echo, nothing leaves
// directly, and the router says why.
func TestGuestUDPRefusedAssociation(t *testing.T) {
	s := udpScene(t, config(lab.GoSocksAddr, ""))
	if got, err := udpExchange(s.ctx, s.lab.Guest(), lab.UDPEchoAddr, 2*time.Second); err == nil {
		t.Errorf("the guest's UDP was answered: %q", got)
	}
	s.waitLog("udp association failed", 5*time.Second)
	if n := len(s.lab.UDPLog()); n != 0 {
		t.Errorf("the udp echo heard %d datagrams", n)
	}
	s.wantNoLeak("refused association")
	// TCP still goes through the same proxy.
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("guest TCP: exit %d, %q", code, out)
	}
}

// TestGuestUDPGuardAlone: with the guard and no router, the guest's UDP is refused.
func TestGuestUDPGuardAlone(t *testing.T) {
	s := newLab(t, config(lab.DanteAddr, ""))
	if _, err := udpExchange(s.ctx, s.lab.Guest(), lab.UDPEchoAddr, 2*time.Second); err != nil {
		t.Fatalf("without a router the lab's NAT should carry UDP (the test would prove nothing): %v", err)
	}
	if out, code := s.routerCmd("guard", "--config", s.cfg); code != 0 {
		t.Fatalf("router guard: exit %d\n%s", code, out)
	}
	s.lab.ResetLogs()
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := udpExchange(s.ctx, s.lab.Guest(), lab.UDPEchoAddr, time.Second); err == nil {
		t.Errorf("guard alone: the guest's UDP was answered: %q", got)
	}
	if n := len(s.lab.UDPLog()); n != 0 {
		t.Errorf("the udp echo heard %d datagrams", n)
	}
	s.wantNoLeak("guard alone, UDP")
}

// TestHypervisorUDPThroughTheProxy: with local = true, the hypervisor process's own UDP (the
// guest's QUIC in VirtualBox NAT) is captured on the host and leaves through the proxy's UDP
// association.
func TestHypervisorUDPThroughTheProxy(t *testing.T) {
	s := udpScene(t, config(lab.GoSocksUDPAddr, ""))
	vbox := s.hypervisorCopy("dig", "VBoxHeadless")
	// dig sends one datagram to the UDP echo's port; the echo's answer is no DNS, which
	// does not matter: the echo's log says who sent it.
	run(s.ctx, s.lab.Host(), vbox, "+time=1", "+tries=1", "-p", "7", "@"+lab.ServiceAddr, "probe.example")
	log := s.lab.UDPLog()
	if len(log) == 0 {
		t.Fatalf("the hypervisor's UDP did not reach the echo\n%s", s.log())
	}
	for _, p := range log {
		if p.Source.Addr().String() != lab.ExitAddr {
			t.Errorf("the udp echo saw %v, want the proxy's exit %s", p, lab.ExitAddr)
		}
	}
	s.wantNoLeak("hypervisor UDP")
	s.stopRouter(syscall.SIGTERM)
	if !strings.Contains(s.log(), `msg="udp flow"`) || !strings.Contains(s.log(), "app=VBoxHeadless") {
		t.Errorf("no udp flow record of the hypervisor:\n%s", s.log())
	}
}

// TestDNSOverUDPThroughTheProxy: [dns] mode = "proxy" with transport = "udp": the router
// relays the guest's queries as datagrams through the proxy's UDP association; the lab DNS
// hears them over UDP from the proxy's exit address.
func TestDNSOverUDPThroughTheProxy(t *testing.T) {
	for _, up := range []struct{ name, addr string }{{"go-socks5", lab.GoSocksUDPAddr}, {"dante", lab.DanteAddr}} {
		t.Run(up.name, func(t *testing.T) {
			s := udpScene(t, config(up.addr, "mode = \"proxy\"\ntransport = \"udp\"\n"))
			out, code := run(s.ctx, s.lab.Guest(), "dig", "+short", "+time=3", "+tries=2", "@"+lab.ServiceAddr, lab.EchoName, "A")
			if code != 0 || strings.TrimSpace(out) != lab.ServiceAddr {
				t.Fatalf("dig %s from the guest: exit %d, %q; want %s", lab.EchoName, code, out, lab.ServiceAddr)
			}
			qs := s.lab.DNSLog()
			if len(qs) == 0 {
				t.Fatal("the lab DNS heard nothing")
			}
			for _, q := range qs {
				if q.Transport != "udp" || q.Source.Addr().String() != lab.ExitAddr {
					t.Errorf("the lab DNS heard %v; want udp from the proxy's exit %s", q, lab.ExitAddr)
				}
			}
			s.wantNoLeak("DNS over UDP through the proxy")
		})
	}
}
