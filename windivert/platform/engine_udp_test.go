package platform

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/agentcage/router/internal/echotest"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/capture/capturetest"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/packet"
	"github.com/agentcage/router/windivert/windiverttest"
)

// TestWindowsUDPThroughTheProxy: on the Windows engine (a fake WinDivert), a datagram that a
// rule proxies goes to the router, through a real SOCKS5 UDP association (go-socks5 on
// loopback) to its destination, and the answer is injected inbound to the app as if from
// the destination. The destination's public address 198.51.100.1 stands for a loopback
// server: the proxy's dialer maps it back.
func TestWindowsUDPThroughTheProxy(t *testing.T) {
	echo := echotest.UDP(t, "echo ")
	dst := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), echo.Port())

	proxy := socks5test.Start(t, socks5test.Options{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != dst.String() {
			return nil, fmt.Errorf("test proxy: %s is not the test's destination", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, echo.String())
	}})

	// local = true: the app is this host's own process, not a caged one, and its flows go
	// through the rules only with local capture.
	cfg := capturetest.Parse(t, fmt.Sprintf(`
[proxy.exit]
address = %q
[capture]
local = true
[[rule]]
name = "udp"
hosts = ["198.51.100.0/24"]
network = "udp"
action = "proxy"
`, proxy.Addr.String()))
	s := newWindowsScene(t)
	pol := policy.New(cfg, s.p.Env())
	r, err := router.New(routerSettings(cfg, pol), router.Options{Original: s.p.Original})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s.p.UseRouter(udpRouter{r})
	if err := s.p.Install(cfg, pol, nil); err != nil {
		t.Fatal(err)
	}
	defer s.p.Close()

	var nh *windiverttest.Handle
	for _, h := range s.drv.OpenHandles() {
		if h.Layer == windivert.LayerNetwork && h.Flags == 0 {
			nh = h
		}
	}
	if nh == nil {
		t.Fatal("no diverting NETWORK handle")
	}
	app := netip.MustParseAddrPort("192.0.2.10:50000")
	b, err := packet.Build(packet.Spec{Src: app, Dst: dst, Proto: packet.ProtoUDP, Payload: []byte("ping")})
	if err != nil {
		t.Fatal(err)
	}
	var a windivert.Address
	a.SetLayer(windivert.LayerNetwork)
	a.SetOutbound(true)
	a.SetNetwork(windivert.NetworkData{IfIdx: 12, SubIfIdx: 3})
	nh.Deliver(b, a)

	wait.For(t, "the answer injected", 5*time.Second, func() bool {
		for _, sent := range nh.Sent() {
			p, err := packet.Parse(sent.Packet)
			if err != nil || !p.IsUDP() {
				continue
			}
			from, to := netip.AddrPortFrom(p.Src(), p.SrcPort()), netip.AddrPortFrom(p.Dst(), p.DstPort())
			if from != dst || to != app || string(p.Payload()) != "echo ping" || sent.Addr.Outbound() || sent.Addr.Network().IfIdx != 12 {
				t.Fatalf("injected %v -> %v %q outbound=%v if=%v; want the echo's answer from %v to %v, inbound on if 12",
					from, to, p.Payload(), sent.Addr.Outbound(), sent.Addr.Network(), dst, app)
			}
			return true
		}
		return false
	})
}
