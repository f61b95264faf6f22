package nftcap

import (
	"net"
	"testing"
	"time"
)

// TestLocalCapture plays Spec.Local: the host's own outbound connections are captured,
// except the router's marked sockets, loopback and the host's own addresses.
func TestLocalCapture(t *testing.T) {
	s := newScene(t)
	spec := sceneSpec()
	spec.Local = true
	s.install(t, spec)
	netTCP := s.net.listen(t, "tcp", ":80")
	netSeen := udpService(t, s.net, 53)
	marked := net.Dialer{Control: MarkControl(testMark)}

	t.Run("outbound tcp is redirected", func(t *testing.T) {
		ln := s.host.listen(t, "tcp", hostPort("::", listenPort))
		for _, tc := range []struct{ name, dst, from string }{
			{"ipv4", hostPort(netAddr4, 80), hostNet4},
			{"ipv6", hostPort(netAddr6, 80), hostNet6},
			{"ipv4 to a vm", hostPort(vmAddr4, 22), hostVM4},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s.noLeak(t, func() { expectRedirected(t, s.host, net.Dialer{}, ln, tc.dst, tc.from) })
			})
		}
		expectNoAccept(t, netTCP)
	})

	t.Run("marked sockets are not captured", func(t *testing.T) {
		ln := s.host.listen(t, "tcp", hostPort("::", listenPort))
		for _, dst := range []string{hostPort(netAddr4, 80), hostPort(netAddr6, 80)} {
			t.Run(dst, func(t *testing.T) {
				if _, err := s.host.dial(t, marked, "tcp", dst); err != nil {
					t.Fatalf("marked dial %s: %v", dst, err)
				}
				c, err := accept(netTCP, 2*time.Second)
				if err != nil {
					t.Fatalf("net listener: %v", err)
				}
				c.Close()
			})
		}
		expectNoAccept(t, ln)
	})

	t.Run("loopback and own addresses are not captured", func(t *testing.T) {
		ln := s.host.listen(t, "tcp", hostPort("::", listenPort))
		svc := s.host.listen(t, "tcp", ":9000")
		for _, dst := range []string{
			hostPort("127.0.0.1", 9000), hostPort("::1", 9000), hostPort("127.0.0.2", 9000),
			hostPort(hostVM4, 9000), hostPort(hostNet4, 9000), hostPort(hostVM6, 9000), hostPort(hostNet6, 9000),
		} {
			t.Run(dst, func(t *testing.T) {
				if _, err := s.host.dial(t, net.Dialer{}, "tcp", dst); err != nil {
					t.Fatalf("dial %s: %v", dst, err)
				}
				c, err := accept(svc, 2*time.Second)
				if err != nil {
					t.Fatalf("service on :9000: %v", err)
				}
				c.Close()
			})
		}
		expectNoAccept(t, ln)
	})

	t.Run("dns", func(t *testing.T) {
		routerSeen := udpService(t, s.host, dnsPort)
		for _, dst := range []string{hostPort(netAddr4, 53), hostPort(netAddr6, 53)} {
			t.Run("redirected "+dst, func(t *testing.T) {
				s.noLeak(t, func() {
					got, peer, err := udpExchange(t, s.host, dst, 2*time.Second)
					if err != nil || got != "answer" || peer.String() != dst {
						t.Fatalf("dns to %s: answer %q from %v, %v; want the router's answer from %s", dst, got, peer, err, dst)
					}
					<-routerSeen
				})
			})
		}
		t.Run("marked is not redirected", func(t *testing.T) {
			// Up to three queries, each from a new socket: a datagram may be lost, and a new
			// source port may meet a redirected query's conntrack entry (its NAT is decided
			// at that entry's first packet, mark or not), which the next socket will not.
			for try := range 3 {
				var c net.Conn
				var err error
				s.host.do(t, func() { c, err = marked.Dial("udp", hostPort(netAddr4, 53)) })
				if err != nil {
					t.Fatal(err)
				}
				c.Write([]byte("query"))
				select {
				case <-netSeen:
					c.Close()
					return
				case <-time.After(time.Second):
					c.Close()
					select {
					case src := <-routerSeen:
						t.Logf("try %d: the marked query from %v reached the router", try+1, src)
					default:
						t.Logf("try %d: the marked query did not reach net", try+1)
					}
				}
			}
			t.Fatal("marked DNS query did not reach net")
		})
		t.Run("loopback is not redirected", func(t *testing.T) {
			loSeen := udpService(t, s.host, 53)
			for _, dst := range []string{"127.0.0.1:53", "[::1]:53", hostPort(hostNet4, 53)} {
				if _, _, err := udpExchange(t, s.host, dst, 2*time.Second); err != nil {
					t.Fatalf("dns to %s: %v", dst, err)
				}
				<-loSeen
			}
			select {
			case src := <-routerSeen:
				t.Errorf("router DNS received a query from %v", src)
			default:
			}
		})
	})

	t.Run("router dead", func(t *testing.T) {
		s.noLeak(t, func() {
			expectRefused(t, s.host, net.Dialer{}, hostPort(netAddr4, 80))
			expectRefused(t, s.host, net.Dialer{}, hostPort(netAddr6, 80))
		})
		expectNoAccept(t, netTCP)
	})

	t.Run("dns port 0 refuses dns", func(t *testing.T) {
		spec := spec
		spec.DNSPort = 0
		s.install(t, spec)
		s.noLeak(t, func() {
			for _, dst := range []string{hostPort(netAddr4, 53), hostPort(netAddr6, 53)} {
				if _, _, err := udpExchange(t, s.host, dst, 300*time.Millisecond); err == nil {
					t.Errorf("dns to %s answered, want nothing", dst)
				}
			}
			expectRefused(t, s.host, net.Dialer{}, hostPort(netAddr4, 53))
		})
		select {
		case src := <-netSeen:
			t.Errorf("net DNS received a query from %v", src)
		default:
		}
	})
}
