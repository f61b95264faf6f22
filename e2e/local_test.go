//go:build linux

package e2e

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
)

// sendUDP sends one datagram from the host namespace to dst; mark, when not zero, is put on
// the socket (the router's own mark lets it pass the guard: the positive control).
func (s *scene) sendUDP(dst string, mark int) error {
	s.t.Helper()
	ap := netip.MustParseAddrPort(dst)
	return s.lab.Host().Do(func() error {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1)
				if serr == nil && mark != 0 {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, mark)
				}
			})
			if err != nil {
				return err
			}
			return serr
		}}
		network, laddr := "udp4", "0.0.0.0:0"
		if ap.Addr().Is6() {
			network, laddr = "udp6", "[::]:0"
		}
		pc, err := lc.ListenPacket(context.Background(), network, laddr)
		if err != nil {
			return err
		}
		defer pc.Close()
		_, err = pc.WriteTo([]byte("announce"), net.UDPAddrFromAddrPort(ap))
		if err != nil && strings.Contains(err.Error(), "operation not permitted") {
			return nil // refused by the guard on the way out: nothing left
		}
		return err
	})
}

// TestLocalLinkTraffic: with local = true the host's own multicast and broadcast UDP (mDNS,
// SSDP, a subnet broadcast) do not leave, while the link's housekeeping does: the guest
// still resolves the host's IPv6 neighbour advertisements and reaches it over IPv6.
func TestLocalLinkTraffic(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	for _, dst := range []string{
		"224.0.0.251:5353",                          // mDNS
		"239.255.255.250:1900",                      // SSDP
		"198.51.100.255:9",                          // the uplink's subnet broadcast
		"255.255.255.255:9",                         // limited broadcast
		"[ff02::fb%" + lab.HostUplinkDev + "]:5353", // mDNS over IPv6
		"[ff02::1%" + lab.HostUplinkDev + "]:9",
	} {
		if err := s.sendUDP(dst, 0); err != nil {
			t.Errorf("send to %s: %v", dst, err)
		}
	}
	time.Sleep(100 * time.Millisecond) // not ordering: a window for a leak that must not come; no event says none will
	s.wantNoLeak("host multicast and broadcast")

	// Positive control: the same datagrams with the router's mark pass the guard and are
	// counted on the uplink.
	if err := s.sendUDP("224.0.0.251:5353", conf.DefaultMark); err != nil {
		t.Fatal(err)
	}
	if err := s.sendUDP("198.51.100.255:9", conf.DefaultMark); err != nil {
		t.Fatal(err)
	}
	_ = wait.Poll(5*time.Second, func() bool { return s.leaks().UDP >= 2 }) // the check below says what it missed
	if l := s.leaks(); l.UDP < 2 {
		t.Errorf("the leak counter missed the marked multicast and broadcast (%v): the check above proves nothing", l)
	}

	// IPv6 between the guest and the host: neighbour discovery both ways works under the
	// guard (the host's advertisements reach the guest), and the host answers with a
	// refusal rather than silence.
	if err := s.lab.AddUnlistedGuestAddrs(s.ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Second)
	c, err := s.lab.Guest().Dial(ctx, "tcp", "["+lab.UnlistedHostAddr6+"]:2222")
	cancel()
	if err == nil {
		c.Close()
		t.Fatalf("the guest connected to the host on [%s]:2222", lab.UnlistedHostAddr6)
	}
	if !strings.Contains(err.Error(), "refused") {
		t.Errorf("guest to the host over IPv6: %v after %v, want refused at once (neighbour discovery broken?)", err, time.Since(start))
	}
	out, _ := run(s.ctx, s.lab.Guest(), "ip", "-6", "neigh", "show", lab.UnlistedHostAddr6)
	if !strings.Contains(out, "lladdr") {
		t.Errorf("the guest has no link-layer address for the host's %s: %q", lab.UnlistedHostAddr6, out)
	}
}
