package nftcap

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

const (
	udpPort     = 7101
	udpTestMark = 0x2b
	udpTable    = 4242
)

func udpSpec() Spec {
	s := sceneSpec()
	s.UDPPort, s.UDPMark, s.UDPTable = udpPort, udpTestMark, udpTable
	return s
}

// tproxyServer runs the router's side in the host namespace: the transparent sockets on
// udpPort, answering each datagram with "via router" from its original destination (a reply
// socket bound to it). Each (source, original destination) is reported.
func tproxyServer(t *testing.T, host *netns) <-chan [2]netip.AddrPort {
	t.Helper()
	seen := make(chan [2]netip.AddrPort, 16)
	for _, network := range []string{"udp4", "udp6"} {
		var u *UDPConn
		var err error
		host.do(t, func() { u, err = ListenUDP(network, udpPort, testMark) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { u.Close() })
		go func() {
			buf := make([]byte, 512)
			for {
				_, src, dst, err := u.ReadFrom(buf)
				if err != nil {
					return
				}
				select {
				case seen <- [2]netip.AddrPort{src, dst}:
				default:
				}
				var rc *net.UDPConn
				host.do(t, func() { rc, err = ListenReply(dst, testMark) })
				if err != nil {
					t.Errorf("reply socket %v: %v", dst, err)
					continue
				}
				rc.WriteToUDPAddrPort([]byte("via router"), src)
				rc.Close()
			}
		}()
	}
	return seen
}

// TestUDPCapture: VM UDP (not DNS) reaches the transparent socket with its original
// destination and the answer comes back from that destination; nothing leaves; local
// destinations stay with the host; the policy routing comes and goes with the table; and
// with nobody listening the guard still refuses the VM's UDP.
func TestUDPCapture(t *testing.T) {
	s := newScene(t)
	spec := udpSpec()
	s.install(t, spec)
	netUDP := s.net.listenPacket(t, "udp", ":9999")

	t.Run("guard without a listener refuses", func(t *testing.T) {
		s.noLeak(t, func() {
			for _, dst := range []string{hostPort(netAddr4, 9999), hostPort(netAddr6, 9999)} {
				if _, _, err := udpExchange(t, s.vm, dst, 300*time.Millisecond); err == nil {
					t.Errorf("udp to %s answered with nobody listening", dst)
				}
			}
		})
	})

	seen := tproxyServer(t, s.host)
	t.Run("captured", func(t *testing.T) {
		for _, tc := range []struct{ name, dst, from string }{
			{"ipv4", hostPort(netAddr4, 9999), vmAddr4},
			{"ipv6", hostPort(netAddr6, 9999), vmAddr6},
			{"quic", "203.0.113.7:443", vmAddr4},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s.noLeak(t, func() {
					got, peer, err := udpExchange(t, s.vm, tc.dst, 2*time.Second)
					if err != nil {
						t.Fatalf("udp exchange with %s: %v", tc.dst, err)
					}
					if got != "via router" || peer.String() != tc.dst {
						t.Errorf("answer %q from %v, want %q from %s", got, peer, "via router", tc.dst)
					}
					select {
					case sd := <-seen:
						if sd[0].Addr().String() != tc.from || sd[1].String() != tc.dst {
							t.Errorf("router saw %v -> %v, want %s -> %s", sd[0], sd[1], tc.from, tc.dst)
						}
					case <-time.After(time.Second):
						t.Error("the router saw nothing")
					}
				})
			})
		}
		netUDP.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, addr, err := netUDP.ReadFrom(make([]byte, 64)); err == nil {
			t.Errorf("net received a datagram from %v", addr)
		}
	})

	t.Run("dns stays with the dns server", func(t *testing.T) {
		senders := udpService(t, s.host, dnsPort)
		got, _, err := udpExchange(t, s.vm, hostPort(netAddr4, 53), 2*time.Second)
		if err != nil || got != "answer" {
			t.Fatalf("dns: %q, %v; want the dns server's answer", got, err)
		}
		<-senders
	})

	t.Run("the host itself is not captured", func(t *testing.T) {
		// A datagram to the host's own address is the input chain's: refused, not captured.
		if _, _, err := udpExchange(t, s.vm, hostPort(hostVM4, 9999), 300*time.Millisecond); err == nil {
			t.Error("udp to the host answered")
		}
		select {
		case sd := <-seen:
			t.Errorf("router saw %v -> %v", sd[0], sd[1])
		default:
		}
	})

	t.Run("the socket takes only what tproxy hands it", func(t *testing.T) {
		for _, dst := range []string{hostPort(hostVM4, udpPort), hostPort(hostVM6, udpPort)} {
			if _, _, err := udpExchange(t, s.vm, dst, 300*time.Millisecond); err == nil {
				t.Errorf("udp to the router's socket %s answered", dst)
			}
		}
		if _, _, err := udpExchange(t, s.net, hostPort(hostNet4, udpPort), 300*time.Millisecond); err == nil {
			t.Error("udp from the network to the router's socket answered")
		}
		select {
		case sd := <-seen:
			t.Errorf("router saw %v -> %v", sd[0], sd[1])
		default:
		}
	})

	rules := func() string { return s.host.ip(t, "rule", "show") + s.host.ip(t, "-6", "rule", "show") }
	routes := func() string {
		return s.host.ip(t, "route", "show", "table", "4242") + s.host.ip(t, "-6", "route", "show", "table", "4242")
	}
	t.Run("policy routing", func(t *testing.T) {
		if r := rules(); strings.Count(r, "fwmark 0x2b lookup 4242") != 2 {
			t.Errorf("want one fwmark rule per family:\n%s", r)
		}
		if r := routes(); strings.Count(r, "local default dev lo") != 2 {
			t.Errorf("want one local route per family:\n%s", r)
		}
		s.install(t, spec) // again: nothing doubles
		if r := rules(); strings.Count(r, "fwmark 0x2b lookup 4242") != 2 {
			t.Errorf("after a second install:\n%s", r)
		}
		other := spec
		other.UDPMark, other.UDPTable = 0x2c, 4343
		s.install(t, other)
		if r := rules(); strings.Contains(r, "0x2b") || strings.Count(r, "fwmark 0x2c lookup 4343") != 2 {
			t.Errorf("after a new mark and table:\n%s", r)
		}
		if r := routes(); r != "" {
			t.Errorf("the old table's routes stay:\n%s", r)
		}
		if err := Remove(spec.Table, WithNetNS(s.host.fd)); err != nil {
			t.Fatal(err)
		}
		if r := rules(); strings.Contains(r, "fwmark") {
			t.Errorf("after remove:\n%s", r)
		}
		if r := s.host.ip(t, "route", "show", "table", "4343"); r != "" {
			t.Errorf("after remove:\n%s", r)
		}
	})
}

// TestUDPCaptureLocal: with Local, the host's own UDP is marked, rerouted to lo and
// captured like a VM's; the router's own marked sockets, DNS and the allowed ports are not.
func TestUDPCaptureLocal(t *testing.T) {
	s := newScene(t)
	spec := udpSpec()
	spec.Local = true
	spec.LocalUDPAllow = []uint16{123}
	s.install(t, spec)
	seen := tproxyServer(t, s.host)
	netSeen := udpService(t, s.net, 123)

	for _, tc := range []struct{ name, dst, from string }{
		{"ipv4", hostPort(netAddr4, 9999), hostNet4},
		{"ipv6", hostPort(netAddr6, 9999), hostNet6},
		{"to a vm", hostPort(vmAddr4, 9999), hostVM4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.noLeak(t, func() {
				got, peer, err := udpExchange(t, s.host, tc.dst, 2*time.Second)
				if err != nil {
					t.Fatalf("udp exchange with %s: %v", tc.dst, err)
				}
				if got != "via router" || peer.String() != tc.dst {
					t.Errorf("answer %q from %v, want %q from %s", got, peer, "via router", tc.dst)
				}
				sd := <-seen
				if sd[0].Addr().String() != tc.from || sd[1].String() != tc.dst {
					t.Errorf("router saw %v -> %v, want %s -> %s", sd[0], sd[1], tc.from, tc.dst)
				}
			})
		})
	}
	t.Run("allowed port goes direct", func(t *testing.T) {
		got, _, err := udpExchange(t, s.host, hostPort(netAddr4, 123), 2*time.Second)
		if err != nil || got != "answer" {
			t.Fatalf("ntp: %q, %v", got, err)
		}
		<-netSeen
	})
	t.Run("marked sockets go direct", func(t *testing.T) {
		var c net.Conn
		var err error
		s.host.do(t, func() { c, err = (&net.Dialer{Control: MarkControl(testMark)}).Dial("udp", hostPort(netAddr4, 123)) })
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("q"))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 16)); err != nil {
			t.Fatalf("marked socket: %v", err)
		}
		select {
		case sd := <-seen:
			t.Errorf("router saw %v -> %v", sd[0], sd[1])
		default:
		}
	})
}
