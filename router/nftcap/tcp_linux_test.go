package nftcap

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

func tcpTProxySpec() Spec {
	s := sceneSpec()
	s.TCPTProxy, s.UDPMark, s.UDPTable = true, udpTestMark, udpTable
	return s
}

// listenTransparent opens the router's listener as the daemon does with TCPTProxy:
// [::]:listenPort, marked, IP_TRANSPARENT (TransparentControl).
func listenTransparent(t *testing.T, ns *netns) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	lc := net.ListenConfig{Control: TransparentControl(testMark)}
	ns.do(t, func() { ln, err = lc.Listen(context.Background(), "tcp", hostPort("::", listenPort)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestVMCaptureTCPTProxy plays the VM side of the TCP capture by TPROXY: handed over
// unchanged to a transparent listener, redirected otherwise, refused with nobody listening,
// and the listener's port still closed to direct connections.
func TestVMCaptureTCPTProxy(t *testing.T) {
	s := newScene(t)
	s.install(t, tcpTProxySpec())
	netTCP := s.net.listen(t, "tcp", ":80")

	t.Run("handed over", func(t *testing.T) {
		ln := listenTransparent(t, s.host)
		for _, tc := range []struct {
			name, dst, from string
			natted          bool // redirected rather than handed over
		}{
			{"ipv4", hostPort(netAddr4, 80), vmAddr4, false},
			{"ipv6", hostPort(netAddr6, 443), vmAddr6, false},
			{"ipv4 outside every known network", "203.0.113.7:22", vmAddr4, false},
			{"ipv4 to the listener's port", hostPort(netAddr4, listenPort), vmAddr4, true},
			{"ipv6 to the listener's port", hostPort(netAddr6, listenPort), vmAddr6, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s.noLeak(t, func() {
					local := make(chan netip.AddrPort, 1)
					go func() {
						// expectRedirected accepts the connection; peek at it first.
						c, err := accept(ln, 2*time.Second)
						if err != nil {
							local <- netip.AddrPort{}
							return
						}
						local <- c.LocalAddr().(*net.TCPAddr).AddrPort()
						c.Close()
					}()
					c, err := s.vm.dial(t, net.Dialer{}, "tcp", tc.dst)
					if err != nil {
						t.Fatalf("dial %s: %v", tc.dst, err)
					}
					c.Close()
					got := <-local
					got = netip.AddrPortFrom(got.Addr().Unmap(), got.Port())
					if handed := got == netip.MustParseAddrPort(tc.dst); handed == tc.natted {
						t.Errorf("accepted with local address %v (dst %s), want handed over: %v", got, tc.dst, !tc.natted)
					}
					expectRedirected(t, s.vm, net.Dialer{}, ln, tc.dst, tc.from)
				})
			})
		}
		expectNoAccept(t, netTCP)
	})

	t.Run("listener port closed to direct connections", func(t *testing.T) {
		ln := listenTransparent(t, s.host)
		s.noLeak(t, func() {
			expectRefused(t, s.vm, net.Dialer{}, hostPort(hostVM4, listenPort))
			expectRefused(t, s.vm, net.Dialer{}, hostPort(hostVM6, listenPort))
		})
		expectNoAccept(t, ln)
	})

	t.Run("plain listener: redirected", func(t *testing.T) {
		ln := s.host.listen(t, "tcp", hostPort("::", listenPort))
		s.noLeak(t, func() { expectRedirected(t, s.vm, net.Dialer{}, ln, hostPort(netAddr4, 80), vmAddr4) })
	})

	t.Run("nobody listening: refused", func(t *testing.T) {
		s.noLeak(t, func() {
			expectRefused(t, s.vm, net.Dialer{}, hostPort(netAddr4, 80))
			expectRefused(t, s.vm, net.Dialer{}, hostPort(netAddr6, 443))
		})
	})

	t.Run("spoofed source", func(t *testing.T) {
		ln := listenTransparent(t, s.host)
		s.vm.ip(t, "addr", "add", "192.0.2.99/32", "dev", "vm0")
		defer s.vm.ip(t, "addr", "del", "192.0.2.99/32", "dev", "vm0")
		s.noLeak(t, func() { expectNoConnect(t, s.vm, from("192.0.2.99"), hostPort(netAddr4, 80)) })
		expectNoAccept(t, ln)
	})
}
