package nftcap

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// TestVMCapture plays the VM side of the capture in the three-namespace scene.
func TestVMCapture(t *testing.T) {
	s := newScene(t)
	spec := sceneSpec()
	s.install(t, spec)
	// Services inside the net namespace, which nothing from the VM may reach.
	netTCP := s.net.listen(t, "tcp", ":80")
	netUDP := s.net.listenPacket(t, "udp", ":9999")

	t.Run("redirect", func(t *testing.T) {
		ln := s.host.listen(t, "tcp", hostPort("::", listenPort))
		for _, tc := range []struct{ name, dst, from string }{
			{"ipv4", hostPort(netAddr4, 80), vmAddr4},
			{"ipv6", hostPort(netAddr6, 443), vmAddr6},
			{"ipv4 any port", hostPort(netAddr4, 8443), vmAddr4},
			{"ipv4 outside every known network", "203.0.113.7:22", vmAddr4},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s.noLeak(t, func() { expectRedirected(t, s.vm, net.Dialer{}, ln, tc.dst, tc.from) })
			})
		}
		expectNoAccept(t, netTCP)
	})

	t.Run("dns", func(t *testing.T) {
		senders := udpService(t, s.host, dnsPort)
		dnsTCP := s.host.listen(t, "tcp", hostPort("::", dnsPort))
		for _, tc := range []struct{ name, dst, from string }{
			{"udp ipv4", hostPort(netAddr4, 53), vmAddr4},
			{"udp ipv6", hostPort(netAddr6, 53), vmAddr6},
			{"udp to the host's own address", hostPort(hostVM4, 53), vmAddr4},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s.noLeak(t, func() {
					got, peer, err := udpExchange(t, s.vm, tc.dst, 2*time.Second)
					if err != nil {
						t.Fatalf("udp exchange with %s: %v", tc.dst, err)
					}
					if got != "answer" || peer.String() != tc.dst {
						t.Errorf("answer %q from %v, want %q from %s", got, peer, "answer", tc.dst)
					}
					if src := <-senders; src.Addr().Unmap().String() != tc.from {
						t.Errorf("router DNS saw source %v, want %s", src, tc.from)
					}
				})
			})
		}
		t.Run("tcp", func(t *testing.T) {
			s.noLeak(t, func() { expectRedirected(t, s.vm, net.Dialer{}, dnsTCP, hostPort(netAddr4, 53), vmAddr4) })
		})
	})

	t.Run("udp and icmp are not forwarded", func(t *testing.T) {
		s.noLeak(t, func() {
			for _, dst := range []string{hostPort(netAddr4, 9999), hostPort(netAddr6, 9999), hostPort(netAddr4, 443)} {
				if _, _, err := udpExchange(t, s.vm, dst, 300*time.Millisecond); err == nil {
					t.Errorf("udp to %s answered, want nothing", dst)
				}
			}
			sendICMPEcho(t, s.vm, netAddr4)
			sendICMPEcho(t, s.vm, netAddr6)
			sendICMPEcho(t, s.vm, "169.254.169.254") // link-local: neither redirected nor forwarded
			expectNoConnect(t, s.vm, net.Dialer{}, "169.254.169.254:80")
		})
		netUDP.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, addr, err := netUDP.ReadFrom(make([]byte, 64)); err == nil {
			t.Errorf("net received a datagram from %v", addr)
		}
	})

	t.Run("spoofed sources are not forwarded", func(t *testing.T) {
		// A VM with root can send from an address outside the VM networks; the host
		// would route it like anyone else's traffic.
		s.vm.ip(t, "addr", "add", "192.0.2.99/32", "dev", "vm0")
		s.vm.ip(t, "addr", "add", "2001:db8:99::1/128", "dev", "vm0", "nodad")
		defer func() { // an IPv6 address added last becomes the VM's preferred source
			s.vm.ip(t, "addr", "del", "192.0.2.99/32", "dev", "vm0")
			s.vm.ip(t, "addr", "del", "2001:db8:99::1/128", "dev", "vm0")
		}()
		s.noLeak(t, func() {
			for _, tc := range []struct{ src, dst string }{
				{"192.0.2.99", hostPort(netAddr4, 9999)},
				{"2001:db8:99::1", hostPort(netAddr6, 9999)},
			} {
				var c net.Conn
				var err error
				s.vm.do(t, func() {
					c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(tc.src), 0)),
						net.UDPAddrFromAddrPort(netip.MustParseAddrPort(tc.dst)))
				})
				if err != nil {
					t.Fatal(err)
				}
				c.Write([]byte("exfiltrate"))
				c.Close()
				// TCP too: the SYN alone must not leave.
				expectNoConnect(t, s.vm, from(tc.src), tc.dst)
			}
		})
		// And the host's own services do not hear them either.
		svc := s.host.listenPacket(t, "udp", ":5000")
		var c net.Conn
		var err error
		s.vm.do(t, func() {
			c, err = net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP("192.0.2.99")}, &net.UDPAddr{IP: net.ParseIP(hostVM4), Port: 5000})
		})
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("hello host"))
		c.Close()
		svc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, addr, err := svc.ReadFrom(make([]byte, 64)); err == nil {
			t.Errorf("host service received a datagram from spoofed %v", addr)
		}
	})

	t.Run("host is off limits", func(t *testing.T) {
		svc := s.host.listen(t, "tcp", ":2222")
		for _, dst := range []string{hostPort(hostVM4, 2222), hostPort(hostVM6, 2222), hostPort(hostNet4, 2222), hostPort(hostNet6, 2222)} {
			t.Run(dst, func(t *testing.T) { expectRefused(t, s.vm, net.Dialer{}, dst) })
		}
		expectNoAccept(t, svc)
	})

	t.Run("forward only from allowed sources", func(t *testing.T) {
		fwd := s.host.listen(t, "tcp", hostPort("::", fwdPort))
		for _, tc := range []struct {
			name    string
			ns      *netns
			d       net.Dialer
			dst     string
			allowed bool
		}{
			{"ipv4 allowed", s.vm, from(vmAddr4), hostPort(hostVM4, fwdPort), true},
			{"ipv6 allowed", s.vm, from(vmAddr6), hostPort(hostVM6, fwdPort), true},
			{"ipv4 other vm source", s.vm, from(vmAddr4b), hostPort(hostVM4, fwdPort), false},
			{"ipv6 other vm source", s.vm, from(vmAddr6b), hostPort(hostVM6, fwdPort), false},
			{"allowed source, other host address", s.vm, from(vmAddr4), hostPort(hostNet4, fwdPort), false},
			{"lan host", s.net, net.Dialer{}, hostPort(hostVM4, fwdPort), false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if !tc.allowed {
					expectRefused(t, tc.ns, tc.d, tc.dst)
					expectNoAccept(t, fwd)
					return
				}
				if _, err := tc.ns.dial(t, tc.d, "tcp", tc.dst); err != nil {
					t.Fatalf("dial %s: %v", tc.dst, err)
				}
				c, err := accept(fwd, 2*time.Second)
				if err != nil {
					t.Fatalf("forward listener: %v", err)
				}
				c.Close()
			})
		}
	})

	t.Run("listener only takes redirected connections", func(t *testing.T) {
		ln := s.host.listen(t, "tcp", hostPort("::", listenPort))
		dns := s.host.listen(t, "tcp", hostPort("::", dnsPort))
		for _, tc := range []struct {
			name string
			ns   *netns
			dst  string
		}{
			{"lan host to listener", s.net, hostPort(hostNet4, listenPort)},
			{"lan host to listener ipv6", s.net, hostPort(hostNet6, listenPort)},
			{"lan host to dns", s.net, hostPort(hostNet4, dnsPort)},
			{"vm to listener directly", s.vm, hostPort(hostVM4, listenPort)},
		} {
			t.Run(tc.name, func(t *testing.T) { expectRefused(t, tc.ns, net.Dialer{}, tc.dst) })
		}
		expectNoAccept(t, ln)
		expectNoAccept(t, dns)
	})

	t.Run("nothing is forwarded to the vm", func(t *testing.T) {
		vmSvc := s.vm.listen(t, "tcp", ":8080")
		expectNoConnect(t, s.net, net.Dialer{}, hostPort(vmAddr4, 8080))
		expectNoConnect(t, s.net, net.Dialer{}, hostPort(vmAddr6, 8080))
		expectNoAccept(t, vmSvc)
	})

	t.Run("router dead", func(t *testing.T) {
		// No listener on the redirect ports: the guard alone decides.
		s.noLeak(t, func() {
			expectRefused(t, s.vm, net.Dialer{}, hostPort(netAddr4, 80))
			expectRefused(t, s.vm, net.Dialer{}, hostPort(netAddr6, 80))
			expectRefused(t, s.vm, net.Dialer{}, hostPort(netAddr4, 53))
			_, _, err := udpExchange(t, s.vm, hostPort(netAddr4, 53), time.Second)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("udp dns with no router: %v, want connection refused", err)
			}
		})
		expectNoAccept(t, netTCP)
	})

	t.Run("dns port 0 refuses dns", func(t *testing.T) {
		spec := sceneSpec()
		spec.DNSPort = 0
		s.install(t, spec)
		t.Cleanup(func() { s.install(t, sceneSpec()) })
		netDNS := s.net.listenPacket(t, "udp", ":53")
		s.noLeak(t, func() {
			for _, dst := range []string{hostPort(netAddr4, 53), hostPort(netAddr6, 53), hostPort(hostVM4, 53)} {
				if _, _, err := udpExchange(t, s.vm, dst, 300*time.Millisecond); err == nil {
					t.Errorf("udp dns to %s answered, want nothing", dst)
				}
			}
			expectRefused(t, s.vm, net.Dialer{}, hostPort(netAddr4, 53))
			expectRefused(t, s.vm, net.Dialer{}, hostPort(hostVM4, 53))
		})
		netDNS.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, addr, err := netDNS.ReadFrom(make([]byte, 64)); err == nil {
			t.Errorf("net DNS received a query from %v", addr)
		}
	})

	t.Run("counter sees traffic", func(t *testing.T) {
		// Positive control for noLeak: traffic the host sends itself does reach net.
		before := s.leaks(t)
		if _, err := s.host.dial(t, net.Dialer{}, "tcp", hostPort(netAddr4, 80)); err != nil {
			t.Fatalf("host to net: %v", err)
		}
		if c, err := accept(netTCP, 2*time.Second); err != nil {
			t.Fatalf("net listener: %v", err)
		} else {
			c.Close()
		}
		if got := s.leaks(t) - before; got == 0 {
			t.Error("counter saw nothing of a connection that reached net")
		}
	})
}
