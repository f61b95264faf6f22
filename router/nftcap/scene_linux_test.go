package nftcap

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// scene is three namespaces wired like a hypervisor host:
//
//	vm  [vm0 10.0.2.15,.16 fd00:2::15,16] ── [hvm 10.0.2.2 fd00:2::2] host
//	host [hnet 198.51.100.1 2001:db8:1::1] ── [nhost 198.51.100.2 2001:db8:1::2] net
//
// host forwards and masquerades VM traffic out of hnet (the hypervisor's NAT); net counts
// every packet that reaches it except IPv6 neighbour discovery and multicast listener
// reports (counter "leak" in table inet count).
type scene struct {
	vm, host, net *netns
}

const (
	vmAddr4    = "10.0.2.15"
	vmAddr4b   = "10.0.2.16" // a VM-network source the forward does not allow
	vmAddr6    = "fd00:2::15"
	vmAddr6b   = "fd00:2::16"
	hostVM4    = "10.0.2.2"
	hostVM6    = "fd00:2::2"
	hostNet4   = "198.51.100.1"
	hostNet6   = "2001:db8:1::1"
	netAddr4   = "198.51.100.2"
	netAddr6   = "2001:db8:1::2"
	listenPort = 7070
	dnsPort    = 7053
	fwdPort    = 47831
	testMark   = 0x2a
)

func newScene(t *testing.T) *scene {
	t.Helper()
	s := &scene{vm: newNetNS(t, "vm"), host: newNetNS(t, "host"), net: newNetNS(t, "net")}
	veth(t, s.host, "hvm", s.vm, "vm0")
	veth(t, s.host, "hnet", s.net, "nhost")
	for _, a := range []string{vmAddr4 + "/24", vmAddr4b + "/24"} {
		s.vm.ip(t, "addr", "add", a, "dev", "vm0")
	}
	// The address added last is the one the kernel prefers as a source: vmAddr6.
	for _, a := range []string{vmAddr6b + "/64", vmAddr6 + "/64"} {
		s.vm.ip(t, "addr", "add", a, "dev", "vm0", "nodad")
	}
	s.vm.ip(t, "route", "add", "default", "via", hostVM4)
	s.vm.ip(t, "-6", "route", "add", "default", "via", hostVM6)
	s.host.ip(t, "addr", "add", hostVM4+"/24", "dev", "hvm")
	s.host.ip(t, "addr", "add", hostVM6+"/64", "dev", "hvm", "nodad")
	s.host.ip(t, "addr", "add", hostNet4+"/24", "dev", "hnet")
	s.host.ip(t, "addr", "add", hostNet6+"/64", "dev", "hnet", "nodad")
	s.host.sysctl(t, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	s.host.nft(t, `
table inet hypervisor {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "hnet" ip saddr 10.0.2.0/24 masquerade
		oifname "hnet" ip6 saddr fd00:2::/64 masquerade
	}
}`)
	s.net.ip(t, "addr", "add", netAddr4+"/24", "dev", "nhost")
	s.net.ip(t, "addr", "add", netAddr6+"/64", "dev", "nhost", "nodad")
	s.net.ip(t, "route", "add", "default", "via", hostNet4)
	s.net.ip(t, "-6", "route", "add", "default", "via", hostNet6)
	s.net.nft(t, `
table inet count {
	counter leak {}
	chain prerouting {
		type filter hook prerouting priority raw; policy accept;
		meta nfproto ipv4 counter name "leak"
		meta nfproto ipv6 meta l4proto != ipv6-icmp counter name "leak"
		icmpv6 type != { nd-router-solicit, nd-router-advert, nd-neighbor-solicit, nd-neighbor-advert, mld-listener-report, mld2-listener-report } counter name "leak"
	}
}`)
	return s
}

var packetsRE = regexp.MustCompile(`packets (\d+)`)

// leaks returns how many packets reached the net namespace so far.
func (s *scene) leaks(t *testing.T) int {
	t.Helper()
	out := s.net.exec(t, "nft", "list", "counter", "inet", "count", "leak")
	m := packetsRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no packet count in %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// noLeak runs fn and fails if any packet reached the net namespace meanwhile.
func (s *scene) noLeak(t *testing.T, fn func()) {
	t.Helper()
	before := s.leaks(t)
	fn()
	time.Sleep(50 * time.Millisecond) // not ordering: a window for stray packets in flight; that none comes has no event to wait for
	if got := s.leaks(t) - before; got != 0 {
		t.Errorf("%d packets reached the net namespace, want 0", got)
	}
}

func (s *scene) install(t *testing.T, spec Spec) {
	t.Helper()
	if err := Install(spec, WithNetNS(s.host.fd)); err != nil {
		t.Fatal(err)
	}
}

func sceneSpec() Spec {
	return Spec{
		Table:        "router",
		VMNetworks:   []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("fd00:2::/64")},
		ListenerPort: listenPort,
		DNSPort:      dnsPort,
		Forwards: []Forward{
			{Listen: netip.MustParseAddrPort(hostVM4 + ":47831"), Allow: []netip.Prefix{netip.MustParsePrefix(vmAddr4 + "/32")}},
			{Listen: netip.MustParseAddrPort("[" + hostVM6 + "]:47831"), Allow: []netip.Prefix{netip.MustParsePrefix(vmAddr6 + "/128")}},
		},
		Mark: testMark,
	}
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// accept waits up to d for one connection on ln.
func accept(ln net.Listener, d time.Duration) (net.Conn, error) {
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(d))
	return ln.Accept()
}

// expectNoAccept fails if ln accepts a connection within a short while.
func expectNoAccept(t *testing.T, ln net.Listener) {
	t.Helper()
	if c, err := accept(ln, 200*time.Millisecond); err == nil {
		c.Close()
		t.Errorf("listener %v accepted a connection from %v, want none", ln.Addr(), c.RemoteAddr())
	}
}

// expectRedirected dials dst from ns and checks that ln (the router's listener) receives
// the connection with dst as its original destination and from as its source.
func expectRedirected(t *testing.T, ns *netns, d net.Dialer, ln net.Listener, dst, from string) {
	t.Helper()
	c, err := ns.dial(t, d, "tcp", dst)
	if err != nil {
		t.Fatalf("dial %s: %v", dst, err)
	}
	ac, err := accept(ln, 2*time.Second)
	if err != nil {
		t.Fatalf("router listener: %v", err)
	}
	defer ac.Close()
	got, err := OriginalDst(ac.(*net.TCPConn))
	if err != nil {
		t.Fatalf("OriginalDst: %v", err)
	}
	if want := netip.MustParseAddrPort(dst); got != want {
		t.Errorf("OriginalDst = %v, want %v", got, want)
	}
	// The event loops' way, on the bare descriptor, says the same.
	rc, err := ac.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var byFD netip.AddrPort
	var fdErr error
	rc.Control(func(fd uintptr) { byFD, fdErr = OriginalDstFD(int(fd), ac.RemoteAddr().(*net.TCPAddr).AddrPort()) })
	if fdErr != nil || byFD != got {
		t.Errorf("OriginalDstFD = %v, %v; want %v", byFD, fdErr, got)
	}
	if from != "" {
		if got := ac.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String(); got != from {
			t.Errorf("accepted connection from %s, want %s", got, from)
		}
	}
	// The data path works both ways.
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, 4)
	ac.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(ac, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read at the router: %q, %v", buf, err)
	}
	if _, err := ac.Write([]byte("pong")); err != nil {
		t.Fatalf("write at the router: %v", err)
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("read at the client: %q, %v", buf, err)
	}
}

// expectRefused dials dst from ns and wants a refused connection (TCP reset).
func expectRefused(t *testing.T, ns *netns, d net.Dialer, dst string) {
	t.Helper()
	c, err := ns.dial(t, d, "tcp", dst)
	if err == nil {
		t.Fatalf("dial %s from %s: connected (local %v), want refused", dst, ns.name, c.LocalAddr())
	}
	if !isRefused(err) {
		t.Fatalf("dial %s from %s: %v, want connection refused", dst, ns.name, err)
	}
}

// expectNoConnect dials dst from ns and wants no connection (refused or timed out).
func expectNoConnect(t *testing.T, ns *netns, d net.Dialer, dst string) {
	t.Helper()
	d.Timeout = 500 * time.Millisecond
	if c, err := ns.dial(t, d, "tcp", dst); err == nil {
		t.Fatalf("dial %s from %s: connected (local %v), want no connection", dst, ns.name, c.LocalAddr())
	}
}

func from(addr string) net.Dialer {
	return net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}
}

// udpExchange sends a datagram from ns to dst and returns the answer's payload and sender,
// or an error when nothing comes back within d.
func udpExchange(t *testing.T, ns *netns, dst string, d time.Duration) (string, netip.AddrPort, error) {
	t.Helper()
	var c net.Conn
	var err error
	ns.do(t, func() { c, err = net.Dial("udp", dst) })
	if err != nil {
		t.Fatalf("udp dial %s: %v", dst, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("query")); err != nil {
		return "", netip.AddrPort{}, err
	}
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return "", netip.AddrPort{}, err
	}
	return string(buf[:n]), c.RemoteAddr().(*net.UDPAddr).AddrPort(), nil
}

// udpService listens on addr ("host:port") in ns with one socket per family and answers
// every datagram with "answer" from the address it was sent to (as a DNS server must for
// redirected queries: a query redirected to 127.0.0.1 is answered from 127.0.0.1, which
// conntrack turns back into the original destination). Each sender is reported on the
// returned channel.
func udpService(t *testing.T, ns *netns, port int) <-chan netip.AddrPort {
	t.Helper()
	senders := make(chan netip.AddrPort, 16)
	report := func(a net.Addr) {
		select {
		case senders <- a.(*net.UDPAddr).AddrPort():
		default:
		}
	}
	p4 := ipv4.NewPacketConn(ns.listenPacket(t, "udp4", hostPort("0.0.0.0", port)))
	if err := p4.SetControlMessage(ipv4.FlagDst, true); err != nil {
		t.Fatal(err)
	}
	p6 := ipv6.NewPacketConn(ns.listenPacket(t, "udp6", hostPort("::", port)))
	if err := p6.SetControlMessage(ipv6.FlagDst, true); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 512)
		for {
			_, cm, addr, err := p4.ReadFrom(buf)
			if err != nil {
				return
			}
			p4.WriteTo([]byte("answer"), &ipv4.ControlMessage{Src: cm.Dst}, addr)
			report(addr)
		}
	}()
	go func() {
		buf := make([]byte, 512)
		for {
			_, cm, addr, err := p6.ReadFrom(buf)
			if err != nil {
				return
			}
			p6.WriteTo([]byte("answer"), &ipv6.ControlMessage{Src: cm.Dst}, addr)
			report(addr)
		}
	}()
	return senders
}

// sendICMPEcho sends one echo request from ns to dst (raw socket; no reply awaited).
func sendICMPEcho(t *testing.T, ns *netns, dst string) {
	t.Helper()
	a := netip.MustParseAddr(dst)
	network, msg := "ip4:icmp", []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1} // RFC 792 echo
	if a.Is6() {
		network, msg = "ip6:ipv6-icmp", []byte{128, 0, 0, 0, 0x12, 0x34, 0, 1} // RFC 4443 echo; kernel sums
	} else {
		sum := ^uint16(0x0800 + 0x1234 + 1)
		msg[2], msg[3] = byte(sum>>8), byte(sum)
	}
	var pc net.PacketConn
	var err error
	ns.do(t, func() { pc, err = net.ListenPacket(network, "") })
	if err != nil {
		t.Fatalf("raw socket %s: %v", network, err)
	}
	defer pc.Close()
	if _, err := pc.WriteTo(msg, &net.IPAddr{IP: a.AsSlice()}); err != nil && !errors.Is(err, os.ErrPermission) {
		t.Logf("icmp echo to %s: %v (refused locally is fine)", dst, err)
	}
}
