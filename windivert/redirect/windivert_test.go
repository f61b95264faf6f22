package redirect

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/packet"
	"github.com/agentcage/router/windivert/windiverttest"
)

func testWinDivertConfig() WinDivertConfig {
	return WinDivertConfig{
		ListenerPort: lport,
		DNSPort:      47153,
		Exclusions: windivert.Exclusions{
			Upstreams: []netip.AddrPort{netip.MustParseAddrPort("198.51.100.1:1080")},
			PIDs:      []uint32{99}, // ignored: the engine needs the router's own events
		},
	}
}

func TestWinDivertFilters(t *testing.T) {
	c := testWinDivertConfig()
	for _, f := range []struct {
		name   string
		filter windivert.Filter
		layer  windivert.Layer
		want   []string
		absent []string
	}{
		{"network", c.NetworkFilter(), windivert.LayerNetwork,
			[]string{"outbound", "!loopback", "udp", "tcp.SrcPort == 47100", "tcp.SrcPort == 47153", "udp.DstPort == 53", "198.51.100.1"},
			[]string{"processId"}},
		{"socket", c.SocketFilter(), windivert.LayerSocket,
			[]string{"event == CONNECT", "event == CLOSE", "198.51.100.1"},
			[]string{"processId", "47100"}},
		{"guard", c.GuardFilter(), windivert.LayerNetwork,
			[]string{"inbound", "tcp.DstPort == 47100", "tcp.DstPort == 47153"}, nil},
	} {
		t.Run(f.name, func(t *testing.T) {
			s := f.filter.String()
			if err := f.filter.Check(f.layer); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			for _, w := range f.want {
				if !strings.Contains(s, w) {
					t.Errorf("filter %q lacks %q", s, w)
				}
			}
			for _, w := range f.absent {
				if strings.Contains(s, w) {
					t.Errorf("filter %q has %q", s, w)
				}
			}
		})
	}
}

// handleOf finds the fake handle opened at layer with flags.
func handleOf(t *testing.T, drv *windiverttest.Driver, layer windivert.Layer, flags windivert.Flag) *windiverttest.Handle {
	t.Helper()
	for _, h := range drv.Handles() {
		if h.Layer == layer && h.Flags == flags {
			return h
		}
	}
	t.Fatalf("no %s handle with flags %#x among %d", layer, flags, len(drv.Handles()))
	return nil
}

// TestWinDivertDevice runs the engine over the WinDivert device and the fake driver: the
// handles and their priorities, a SYN whose CONNECT event comes second, the reflected
// packet injected inbound on the captured interface, a pass, and Close.
func TestWinDivertDevice(t *testing.T) {
	drv := windiverttest.NewDriver()
	c := testWinDivertConfig()
	dev, err := OpenWinDivert(drv, c)
	if err != nil {
		t.Fatal(err)
	}
	guard := handleOf(t, drv, windivert.LayerNetwork, windivert.FlagDrop)
	sock := handleOf(t, drv, windivert.LayerSocket, windivert.FlagSniff|windivert.FlagRecvOnly)
	nh := handleOf(t, drv, windivert.LayerNetwork, 0)
	if guard.Priority <= nh.Priority || guard.Filter != c.GuardFilter().String() || nh.Filter != c.NetworkFilter().String() || sock.Filter != c.SocketFilter().String() {
		t.Fatalf("handles: guard %d %q, network %d %q", guard.Priority, guard.Filter, nh.Priority, nh.Filter)
	}

	const pid = 4242
	tbl := testRules(t, appRule("curl.exe", rules.Proxy))
	e, err := New(dev, tbl, Options{
		ListenerPort: lport, DNSPort: 47153, Events: dev,
		Resolver:  &fakeResolver{infos: map[uint32]rules.Owner{pid: {PID: pid, App: "curl.exe"}}},
		EventWait: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()

	var a windivert.Address
	a.SetLayer(windivert.LayerNetwork)
	a.SetOutbound(true)
	a.SetNetwork(windivert.NetworkData{IfIdx: 12, SubIfIdx: 3})
	a.SetIPChecksum(true)
	a.SetTCPChecksum(true)
	nh.Deliver(tcpPkt(appA, direct, syn, 1, 0, ""), a)
	var ev windivert.Address
	ev.SetLayer(windivert.LayerSocket)
	ev.SetEvent(windivert.EventSocketConnect)
	ev.SetSniffed(true)
	ev.SetSocket(windivert.SocketData{ProcessID: pid, Protocol: packet.ProtoTCP,
		LocalAddr: appA.Addr(), LocalPort: appA.Port(), RemoteAddr: direct.Addr(), RemotePort: direct.Port()})
	if !nh.WaitReceivers(1, 5*time.Second) { // SYN first: the engine took it and waits for more
		t.Fatal("the engine never took the SYN")
	}
	sock.Deliver(nil, ev)

	sent := waitSent(t, nh, 1)
	p, err := packet.Parse(sent[0].Packet)
	if err != nil {
		t.Fatal(err)
	}
	got := netip.AddrPortFrom(p.Dst(), p.DstPort())
	sa := sent[0].Addr
	if sa.Outbound() || got != netip.AddrPortFrom(appA.Addr(), lport) || sa.Network().IfIdx != 12 || sa.Network().SubIfIdx != 3 ||
		!sa.IPChecksum() || !sa.TCPChecksum() || !p.ChecksumsValid() {
		t.Fatalf("injected to %v outbound=%v if=%v checksum bits %v/%v", got, sa.Outbound(), sa.Network(), sa.IPChecksum(), sa.TCPChecksum())
	}

	// A direct flow's SYN goes back out with its address bits, the Impostor flag of another
	// driver's injection included (WinDivert lowers the TTL of impostors: no loops).
	var b windivert.Address
	b.SetLayer(windivert.LayerNetwork)
	b.SetOutbound(true)
	b.SetImpostor(true)
	b.SetNetwork(windivert.NetworkData{IfIdx: 12})
	sock.Deliver(nil, func() windivert.Address {
		x := ev
		x.SetSocket(windivert.SocketData{ProcessID: 7, Protocol: packet.ProtoTCP, LocalAddr: appA.Addr(), LocalPort: 50200, RemoteAddr: direct.Addr(), RemotePort: 80})
		return x
	}())
	if !sock.WaitReceivers(1, 5*time.Second) { // the event first: the engine took it
		t.Fatal("the engine never took the CONNECT event")
	}
	nh.Deliver(tcpPkt(netip.AddrPortFrom(appA.Addr(), 50200), direct, syn, 1, 0, ""), b)
	sent = waitSent(t, nh, 2)
	if !sent[1].Addr.Outbound() || sent[1].Addr.Network().IfIdx != 12 || sent[1].Addr.TCPChecksum() || !sent[1].Addr.Impostor() {
		t.Fatalf("passed packet address: outbound=%v if=%v tcp checksum bit %v impostor %v", sent[1].Addr.Outbound(), sent[1].Addr.Network(), sent[1].Addr.TCPChecksum(), sent[1].Addr.Impostor())
	}
	if sa.Impostor() {
		t.Error("a reflected packet (the engine's own) carries the Impostor flag")
	}

	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v", err)
	}
	for _, h := range drv.Handles() {
		if !h.Closed() {
			t.Errorf("handle %s/%d left open", h.Layer, h.Priority)
		}
	}
}

func waitSent(t *testing.T, h *windiverttest.Handle, n int) []windiverttest.Sent {
	t.Helper()
	var s []windiverttest.Sent
	if !wait.Poll(5*time.Second, func() bool { s = h.Sent(); return len(s) >= n }) {
		t.Fatalf("%d packets sent, want %d", len(s), n)
	}
	return s
}

func TestOpenWinDivertFailure(t *testing.T) {
	drv := windiverttest.NewDriver()
	drv.OpenErr = func(_ string, layer windivert.Layer, _ int16, _ windivert.Flag) error {
		if layer == windivert.LayerSocket {
			return windivert.ErrAccessDenied
		}
		return nil
	}
	if _, err := OpenWinDivert(drv, testWinDivertConfig()); err == nil || !strings.Contains(err.Error(), "socket events") {
		t.Fatalf("OpenWinDivert = %v, want the socket handle's error", err)
	}
	if open := drv.OpenHandles(); len(open) != 0 {
		t.Errorf("%d handles left open after a failed open", len(open))
	}
}

// TestIPHelperTables parses hand-made tables in the documented layouts.
func TestIPHelperTables(t *testing.T) {
	le := binary.LittleEndian
	row4 := func(state uint32, l, r netip.AddrPort, pid uint32) []byte {
		b := make([]byte, tcpRow4Size)
		le.PutUint32(b[0:], state)
		a, ra := l.Addr().As4(), r.Addr().As4()
		copy(b[4:], a[:])
		binary.BigEndian.PutUint16(b[8:], l.Port())
		copy(b[12:], ra[:])
		binary.BigEndian.PutUint16(b[16:], r.Port())
		le.PutUint32(b[20:], pid)
		return b
	}
	table := func(rows ...[]byte) []byte {
		b := le.AppendUint32(nil, uint32(len(rows)))
		for _, r := range rows {
			b = append(b, r...)
		}
		return b
	}
	listen := netip.MustParseAddrPort("0.0.0.0:50123")
	tb := table(
		row4(mibTCPStateListen, listen, netip.MustParseAddrPort("0.0.0.0:0"), 1),
		row4(5, appA, direct, 4242),
		row4(5, netip.MustParseAddrPort("192.0.2.11:50123"), direct, 7),
	)
	rows, err := parseTCPTable4(tb)
	if err != nil {
		t.Fatal(err)
	}
	if pid, ok := findOwner(rows, false, appA, direct); !ok || pid != 4242 {
		t.Errorf("tcp4 owner = %d, %v; want 4242", pid, ok)
	}
	if _, err := parseTCPTable4(tb[:len(tb)-1]); err == nil {
		t.Error("short table parsed")
	}

	row6 := make([]byte, tcpRow6Size)
	l6, r6 := appA6.Addr().As16(), proxied6.Addr().As16()
	copy(row6[0:], l6[:])
	binary.BigEndian.PutUint16(row6[20:], appA6.Port())
	copy(row6[24:], r6[:])
	binary.BigEndian.PutUint16(row6[44:], proxied6.Port())
	le.PutUint32(row6[48:], 5)
	le.PutUint32(row6[52:], 66)
	rows, err = parseTCPTable6(table(row6))
	if err != nil {
		t.Fatal(err)
	}
	if pid, ok := findOwner(rows, false, appA6, proxied6); !ok || pid != 66 {
		t.Errorf("tcp6 owner = %d, %v; want 66", pid, ok)
	}

	u4 := make([]byte, udpRow4Size) // 0.0.0.0:5353, pid 8
	binary.BigEndian.PutUint16(u4[4:], 5353)
	le.PutUint32(u4[8:], 8)
	rows, err = parseUDPTable4(table(u4))
	if err != nil {
		t.Fatal(err)
	}
	if pid, ok := findOwner(rows, true, netip.MustParseAddrPort("192.0.2.10:5353"), dnsSrv); !ok || pid != 8 {
		t.Errorf("udp4 wildcard owner = %d, %v; want 8", pid, ok)
	}
	u6 := make([]byte, udpRow6Size)
	copy(u6[0:], l6[:])
	binary.BigEndian.PutUint16(u6[20:], 53000)
	le.PutUint32(u6[24:], 9)
	rows, err = parseUDPTable6(table(u6))
	if err != nil {
		t.Fatal(err)
	}
	if pid, ok := findOwner(rows, true, netip.AddrPortFrom(appA6.Addr(), 53000), netip.AddrPort{}); !ok || pid != 9 {
		t.Errorf("udp6 owner = %d, %v; want 9", pid, ok)
	}
}
