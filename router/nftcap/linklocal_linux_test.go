package nftcap

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/wait"
)

var linkLocalRE = regexp.MustCompile(`inet6 (fe80::[0-9a-f:]+)/64 scope link( \w+)*`)

// linkLocal returns the IPv6 link-local address of dev in ns, waiting (up to 5 s) until it
// is usable: duplicate address detection over.
func linkLocal(t *testing.T, ns *netns, dev string) netip.Addr {
	t.Helper()
	var addr netip.Addr
	if !wait.Poll(5*time.Second, func() bool {
		m := linkLocalRE.FindStringSubmatch(ns.ip(t, "-6", "addr", "show", "dev", dev, "scope", "link"))
		if m != nil && !strings.Contains(m[0], "tentative") {
			addr = netip.MustParseAddr(m[1])
		}
		return addr.IsValid()
	}) {
		t.Fatalf("no link-local address on %s in %s", dev, ns.name)
	}
	return addr
}

// TestLinkLocalIsHost: the host's link-local address on the VM link is the host's like any
// other: with the VM-facing interface caged, a service on [::] is refused through it and DNS
// sent to it is redirected to the router's DNS port. The guest's link-local source is
// outside every VM network, so only the interface cages it.
func TestLinkLocalIsHost(t *testing.T) {
	s := newScene(t)
	spec := sceneSpec()
	spec.VMInterfaces = []string{"hvm"}
	s.install(t, spec)
	host := linkLocal(t, s.host, "hvm")
	linkLocal(t, s.vm, "vm0") // the guest's own, its source towards host
	svc := s.host.listen(t, "tcp", ":2222")
	dst := netip.AddrPortFrom(host.WithZone("vm0"), 2222).String()

	t.Run("service on [::] refused", func(t *testing.T) {
		// Refused by ICMPv6 administratively prohibited (a TCP reset would not be routed back
		// to a link-local source). Over veth the first error reaches the guest while its
		// socket is still busy sending the SYN, which only notes it: the retransmitted SYN,
		// a second later, gets the error that ends the connect.
		start := time.Now()
		c, err := s.vm.dial(t, net.Dialer{}, "tcp", dst)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s: connected", dst)
		}
		if !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EHOSTUNREACH) && !isRefused(err) {
			t.Errorf("dial %s: %v, want refused at once", dst, err)
		}
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Errorf("refusal took %v", d)
		}
		expectNoAccept(t, svc)
	})
	t.Run("dns redirected to the router", func(t *testing.T) {
		routerSeen := udpService(t, s.host, dnsPort)
		hostResolver := s.host.listenPacket(t, "udp6", "[::]:53")
		got, _, err := udpExchange(t, s.vm, netip.AddrPortFrom(host.WithZone("vm0"), 53).String(), 2*time.Second)
		if err != nil || got != "answer" {
			t.Fatalf("dns to the host's link-local address: %q, %v; want the router's answer", got, err)
		}
		select {
		case src := <-routerSeen:
			if !src.Addr().Is6() || !src.Addr().IsLinkLocalUnicast() {
				t.Errorf("router DNS saw %v, want the guest's link-local address", src)
			}
		case <-time.After(time.Second):
			t.Error("the router's DNS port heard nothing")
		}
		hostResolver.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, from, err := hostResolver.ReadFrom(make([]byte, 64)); err == nil {
			t.Errorf("the host's resolver on [::]:53 heard %v", from)
		}
	})
}

// TestGuardCutsConnectionsOpenedBefore: a guest's connection to a host service made before
// the guard (or before its interface was caged) does not go on once the guard is in place;
// a connection the host opened to the guest still gets its replies.
func TestGuardCutsConnectionsOpenedBefore(t *testing.T) {
	s := newScene(t)
	svc := s.host.listen(t, "tcp", ":2222")
	c, err := s.vm.dial(t, net.Dialer{}, "tcp", hostPort(hostVM4, 2222))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := accept(svc, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	vmSvc := s.vm.listen(t, "tcp", ":8080")
	hc, err := s.host.dial(t, net.Dialer{}, "tcp", hostPort(vmAddr4, 8080))
	if err != nil {
		t.Fatal(err)
	}
	vc, err := accept(vmSvc, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()

	s.install(t, sceneSpec())

	c.Write([]byte("after the guard"))
	sc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, err := sc.Read(make([]byte, 64)); err == nil || n > 0 {
		t.Errorf("the host service read %d bytes from a guest connection opened before the guard", n)
	}
	// The host's own connection to the guest works both ways.
	if _, err := hc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	vc.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(vc, buf); err != nil {
		t.Fatalf("guest read: %v", err)
	}
	if _, err := vc.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	hc.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(hc, buf); err != nil || string(buf) != "pong" {
		t.Errorf("the host's connection to the guest got %q, %v; want the reply", buf, err)
	}
}
