//go:build linux

package e2e

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/agentcage/router/internal/lab"
)

// twoGuestConfig is the scene's config with the second guest's network listed too.
func twoGuestConfig(proxy, extra string) string {
	cfg := config(proxy, extra)
	cfg = strings.Replace(cfg, `vm_networks = ["10.0.2.0/24"]`, `vm_networks = ["10.0.2.0/24", "`+lab.SecondGuestNetwork+`"]`, 1)
	return strings.Replace(cfg, `sources = ["10.0.2.0/24"]`, `sources = ["10.0.2.0/24", "`+lab.SecondGuestNetwork+`"]`, 1)
}

// hostResolver is a DNS server of the host's own on [::]:53 (both families) that answers
// every A query with 192.0.2.53 and records who asked: what a VM must never reach.
type hostResolver struct {
	mu    sync.Mutex
	asked []string
}

func (s *scene) startHostResolver() *hostResolver {
	s.t.Helper()
	pc, err := s.lab.Host().ListenPacket(s.ctx, "udp", "[::]:53")
	if err != nil {
		s.t.Fatal(err)
	}
	hr := &hostResolver{}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		hr.mu.Lock()
		hr.asked = append(hr.asked, w.RemoteAddr().String())
		hr.mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(req)
		if len(req.Question) == 1 && req.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 53)})
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	s.t.Cleanup(func() { srv.Shutdown() })
	return hr
}

func (hr *hostResolver) heard() []string {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	return append([]string(nil), hr.asked...)
}

// TestLinkLocalIsHost: the host's link-local address on a VM link is the host's like its
// others. From a guest on the link the router derived at start, and from a second guest on
// a VM link that appears while the router runs (a hypervisor network started later), a
// host service on [::] reached through the host's fe80 address is refused, and DNS sent to
// that address is answered by the router (a fake IP) or refused, never by the host's own
// resolver.
func TestLinkLocalIsHost(t *testing.T) {
	s := newScene(t, twoGuestConfig(lab.GoSocksAddr, ""))
	accepted := s.hostService("[::]:2222", "host service\n")
	resolver := s.startHostResolver()

	guest2 := s.secondGuest()
	// The router cages the new link whole once it sees its address; before the fix it
	// never did (the wait then simply runs out).
	if err := s.router.WaitLog("the VM-facing interfaces changed", 2*time.Second); err != nil {
		t.Logf("the router did not say it caged %s: %v", lab.SecondHostDev, err)
	}
	for _, c := range []struct {
		name    string
		guest   *lab.Netns
		hostDev string
	}{
		{"vm link known at start", s.lab.Guest(), lab.HostVMDev},
		{"vm link that appeared later", guest2, lab.SecondHostDev},
	} {
		t.Run(c.name, func(t *testing.T) {
			hostLL, err := lab.LinkLocal(s.ctx, s.lab.Host(), c.hostDev)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lab.LinkLocal(s.ctx, c.guest, lab.GuestDev); err != nil {
				t.Fatal(err)
			}
			before := accepted.Load()
			dst := netip.AddrPortFrom(netip.MustParseAddr(hostLL).WithZone(lab.GuestDev), 2222).String()
			ctx, cancel := context.WithTimeout(s.ctx, 3*time.Second)
			conn, err := c.guest.Dial(ctx, "tcp", dst)
			cancel()
			if err == nil {
				conn.SetReadDeadline(time.Now().Add(time.Second))
				b := make([]byte, 64)
				n, _ := conn.Read(b)
				conn.Close()
				t.Errorf("the guest connected to the host service at %s: %q", dst, b[:n])
			} else {
				t.Logf("host service at %s: %v", dst, err)
			}
			time.Sleep(50 * time.Millisecond) // not ordering: a window for an accept that must not come; no event says none will
			if n := accepted.Load() - before; n != 0 {
				t.Errorf("the host service on [::] accepted %d connections from the guest", n)
			}

			out, code := run(s.ctx, c.guest, "dig", "+short", "+time=2", "+tries=1", "@"+hostLL+"%"+lab.GuestDev, lab.EchoName)
			ans := strings.TrimSpace(out)
			if a, err := netip.ParseAddr(ans); code == 0 && err == nil && !netip.MustParsePrefix("198.18.0.0/15").Contains(a) {
				t.Errorf("dig @%s: %q, want a fake IP from the router or no answer", hostLL, ans)
			}
			t.Logf("dig @%s%%%s: exit %d, %q", hostLL, lab.GuestDev, code, ans)
			for _, who := range resolver.heard() {
				t.Errorf("the host's resolver on [::]:53 was asked by %s", who)
			}
		})
	}
	// The second guest's own address is caged like the first's: through the proxy.
	if out, code := s.curl(guest2, lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("second guest: exit %d, %q; want the proxy's exit address", code, out)
	}
	s.wantNoLeak("link-local")
}
