package redirect

// Checks of the device's filters against the real WinDivert.dll. They run under Wine on
// Linux (GOOS=windows go test -exec .../go-wine-exec ./redirect/): the DLL's filter
// compiler and evaluator work there, opening a handle does not.

import (
	"net/netip"
	"testing"

	"github.com/agentcage/router/internal/winetest"

	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/dist"
	"github.com/agentcage/router/windivert/packet"
)

func TestWinDivertFiltersWithDLL(t *testing.T) {
	dir := winetest.TempDir(t)
	if err := dist.Install(dir); err != nil {
		t.Fatal(err)
	}
	d, err := windivert.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Release()
	c := testWinDivertConfig()
	for _, f := range []struct {
		name   string
		filter string
		layer  windivert.Layer
	}{
		{"network", c.NetworkFilter().String(), windivert.LayerNetwork},
		{"socket", c.SocketFilter().String(), windivert.LayerSocket},
		{"guard", c.GuardFilter().String(), windivert.LayerNetwork},
	} {
		if err := d.CompileFilter(f.filter, f.layer); err != nil {
			t.Errorf("%s filter: %v", f.name, err)
		}
	}
	ap := netip.MustParseAddrPort
	netAddr := func(outbound, loopback, v6 bool) windivert.Address {
		var a windivert.Address
		a.SetLayer(windivert.LayerNetwork)
		a.SetOutbound(outbound)
		a.SetLoopback(loopback)
		a.SetIPv6(v6)
		return a
	}
	tcp := func(src, dst netip.AddrPort, fl uint8) []byte {
		return packet.MustBuild(packet.Spec{Src: src, Dst: dst, Proto: packet.ProtoTCP, TCPFlags: fl})
	}
	udp := func(src, dst netip.AddrPort) []byte {
		return packet.MustBuild(packet.Spec{Src: src, Dst: dst, Proto: packet.ProtoUDP, Payload: []byte{1}})
	}
	for _, tt := range []struct {
		name   string
		filter windivert.Filter
		pkt    []byte
		addr   windivert.Address
		want   bool
	}{
		{"syn", c.NetworkFilter(), tcp(appA, proxied, syn), netAddr(true, false, false), true},
		{"v6 data", c.NetworkFilter(), tcp(appA6, proxied6, ack), netAddr(true, false, true), true},
		{"quic", c.NetworkFilter(), udp(appA, proxied), netAddr(true, false, false), true},
		{"listener reply", c.NetworkFilter(), tcp(netip.AddrPortFrom(appA.Addr(), lport), proxied, synAck), netAddr(true, false, false), true},
		{"dns tcp server reply", c.NetworkFilter(), tcp(netip.AddrPortFrom(appA.Addr(), 47153), proxied, ack), netAddr(true, false, false), true},
		{"link-local dns", c.NetworkFilter(), udp(ap("[fe80::2]:5000"), ap("[fe80::1]:53")), netAddr(true, false, true), true},
		{"upstream", c.NetworkFilter(), tcp(appA, ap("198.51.100.1:1080"), syn), netAddr(true, false, false), false},
		{"loopback", c.NetworkFilter(), tcp(ap("127.0.0.1:5000"), ap("127.0.0.1:47831"), syn), netAddr(true, true, false), false},
		{"inbound", c.NetworkFilter(), tcp(proxied, appA, synAck), netAddr(false, false, false), false},
		{"lan to listener", c.GuardFilter(), tcp(ap("192.0.2.99:4000"), netip.AddrPortFrom(appA.Addr(), lport), syn), netAddr(false, false, false), true},
		{"lan to ssh", c.GuardFilter(), tcp(ap("192.0.2.99:4000"), ap("192.0.2.10:22"), syn), netAddr(false, false, false), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.addr
			got, err := d.EvalFilter(tt.filter.String(), tt.pkt, &a)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("EvalFilter(%s) = %v, want %v", tt.filter, got, tt.want)
			}
		})
	}
	sock := func(pid uint32, remote netip.AddrPort) windivert.Address {
		var a windivert.Address
		a.SetLayer(windivert.LayerSocket)
		a.SetEvent(windivert.EventSocketConnect)
		a.SetSocket(windivert.SocketData{ProcessID: pid, Protocol: packet.ProtoTCP, LocalAddr: appA.Addr(), LocalPort: appA.Port(),
			RemoteAddr: remote.Addr(), RemotePort: remote.Port()})
		return a
	}
	for _, tt := range []struct {
		name string
		addr windivert.Address
		want bool
	}{
		{"app connect", sock(1000, proxied), true},
		{"own connect is seen", sock(99, proxied), true},
		{"connect to upstream", sock(99, ap("198.51.100.1:1080")), false},
	} {
		t.Run("socket "+tt.name, func(t *testing.T) {
			a := tt.addr
			got, err := d.EvalFilter(c.SocketFilter().String(), nil, &a)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
