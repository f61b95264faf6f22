package redirect

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
	"github.com/agentcage/router/rules/refusal"
	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/packet"
	"github.com/agentcage/router/windivert/windiverttest"
)

// echoPkt builds an ICMP (IPv4) or ICMPv6 echo request from src to dst.
func echoPkt(src, dst netip.Addr) []byte {
	if src.Is4() {
		b := make([]byte, 20+8)
		b[0], b[8], b[9] = 0x45, 64, packet.ProtoICMP
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		copy(b[12:], src.AsSlice())
		copy(b[16:], dst.AsSlice())
		b[20] = 8 // echo request
		binary.BigEndian.PutUint16(b[24:], 0x1234)
		return b
	}
	b := make([]byte, 40+8)
	b[0], b[6], b[7] = 0x60, packet.ProtoICMPv6, 64
	binary.BigEndian.PutUint16(b[4:], 8)
	copy(b[8:], src.AsSlice())
	copy(b[24:], dst.AsSlice())
	b[40] = 128
	return b
}

// scopePolicy is the shared config under local and the DNS scope, judged for Windows.
func scopePolicy(t *testing.T, local bool, dnsCapture string) *policy.Policy {
	t.Helper()
	return parsePolicy(t, "scope.toml", policytest.ScopeConfig(local, dnsCapture), "windows")
}

// TestICMP: an echo request of a caged process is dropped, one whose process no event named
// is dropped after the wait, a host process's passes without local and is dropped with it.
func TestICMP(t *testing.T) {
	const hostPID, vboxPID = 10, 20
	host := netip.MustParseAddr("192.168.1.10")
	res := &fakeResolver{infos: map[uint32]rules.Owner{
		hostPID: {PID: hostPID, App: "PING.EXE"},
		vboxPID: {PID: vboxPID, App: policytest.Hypervisor},
	}}
	for _, c := range []struct {
		name  string
		local bool
		pid   uint32 // 0: no event
		dst   string
		pass  bool
	}{
		{"host ping", false, hostPID, "198.51.100.1", true},
		{"host ping v6", false, hostPID, "2001:db8::1", true},
		{"caged ping", false, vboxPID, "198.51.100.1", false},
		{"caged ping v6", false, vboxPID, "2001:db8::1", false},
		{"no owner", false, 0, "198.51.100.1", false},
		{"host ping, local = true", true, hostPID, "198.51.100.1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, dev, clk := newTest(t, true, scopePolicy(t, c.local, ""), Options{Events: newFakeEvents(), Resolver: res})
			src := host
			dst := netip.MustParseAddr(c.dst)
			proto, typ := packet.ProtoICMP, uint16(8)
			if dst.Is6() {
				src, proto, typ = netip.MustParseAddr("2001:db8::10"), packet.ProtoICMPv6, 128
			}
			if c.pid != 0 {
				e.Event(SocketEvent{Kind: EventConnect, Proto: proto, Local: netip.AddrPortFrom(src, typ), Remote: netip.AddrPortFrom(dst, 0), PID: c.pid})
			}
			for range 2 { // the second request follows the first's decision
				send(e, echoPkt(src, dst), outMeta)
				clk.Advance(50 * time.Millisecond) // past EventWait when no event came
				e.workers.Wait()
				ws := dev.take()
				if got := len(ws) == 1 && ws[0].m.Outbound; got != c.pass || len(ws) > 1 {
					t.Fatalf("wrote %d packets (pass %v), want pass=%v", len(ws), got, c.pass)
				}
			}
			// A dropped echo request counts once as an icmp refusal.
			var n uint64
			for _, r := range e.Refusals() {
				if r.Reason == refusal.ICMP {
					n = r.Count
				}
			}
			if want := map[bool]uint64{true: 0, false: 1}[c.pass]; n != want {
				t.Errorf("icmp refusals %d, want %d (%+v)", n, want, e.Refusals())
			}
		})
	}
}

// TestBudgetUnderUDPFlood: a host app flooding new UDP flows fills the host's share of the
// table and no more (its oldest entries make room), and a caged TCP flow is still admitted
// and reflected.
func TestBudgetUnderUDPFlood(t *testing.T) {
	const p2pPID, vboxPID = 30, 40
	res := &fakeResolver{infos: map[uint32]rules.Owner{
		p2pPID:  {PID: p2pPID, App: "torrent.exe"},
		vboxPID: {PID: vboxPID, App: policytest.Hypervisor},
	}}
	e, dev, _ := newTest(t, true, scopePolicy(t, false, ""), Options{Events: newFakeEvents(), Resolver: res, MaxFlows: 64})
	host := netip.MustParseAddr("192.168.1.10")
	for i := range 500 {
		src := netip.AddrPortFrom(host, uint16(20000+i))
		dst := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.7"), uint16(6881+i%100))
		e.Event(SocketEvent{Kind: EventConnect, Proto: packet.ProtoUDP, Local: src, Remote: dst, PID: p2pPID})
		send(e, udpPkt(src, dst, "p2p"), outMeta)
	}
	ws := dev.take()
	if len(ws) != 500 {
		t.Fatalf("%d of 500 datagrams passed", len(ws))
	}
	st := e.Stats()
	if st.HostFlows != 48 || st.Active > 64 || st.Evicted != 500-48 || st.TableFull != 0 {
		t.Fatalf("after the flood: %+v; want 48 host entries (3/4 of 64), %d evicted", st, 500-48)
	}
	src := netip.AddrPortFrom(host, 50000)
	e.Event(SocketEvent{Kind: EventConnect, Proto: packet.ProtoTCP, Local: src, Remote: proxied, PID: vboxPID})
	send(e, tcpPkt(src, proxied, syn, 1, 0, ""), outMeta)
	got := wantOne(t, dev)
	if got.m.Outbound || got.dst.Port() != lport {
		t.Fatalf("caged SYN during the flood: %v, want reflected to the listener", got)
	}
	if st := e.Stats(); st.Reflected != 1 || st.TableFull != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestSendExBatching: one read batch of passed packets goes back to WinDivert with one
// SendEx (counted by the fake driver), with the Impostor flag kept; nothing goes one by one.
func TestSendExBatching(t *testing.T) {
	drv := windiverttest.NewDriver()
	dev, err := OpenWinDivert(drv, testWinDivertConfig())
	if err != nil {
		t.Fatal(err)
	}
	nh := handleOf(t, drv, windivert.LayerNetwork, 0)
	e, err := New(dev, scopePolicy(t, false, ""), Options{ListenerPort: lport, DNSPort: 47153})
	if err != nil {
		t.Fatal(err)
	}
	// Host flows whose owner nobody names pass (local = false): 10 datagrams of 10 flows
	// and a served connection's SYN-ACK and data, queued before the engine reads, so they
	// come in one batch.
	var a windivert.Address
	a.SetLayer(windivert.LayerNetwork)
	a.SetOutbound(true)
	a.SetImpostor(true)
	a.SetIPChecksum(true)
	a.SetUDPChecksum(true)
	host := netip.MustParseAddr("192.168.1.10")
	const n = 12
	for i := range 10 {
		nh.Deliver(udpPkt(netip.AddrPortFrom(host, uint16(30000+i)), direct, "quic"), a)
	}
	a.SetUDPChecksum(false)
	a.SetTCPChecksum(true)
	server, client := netip.AddrPortFrom(host, 3389), netip.MustParseAddrPort("198.51.100.99:50000")
	nh.Deliver(tcpPkt(server, client, synAck, 1, 2, ""), a)
	nh.Deliver(tcpPkt(server, client, ack, 2, 2, "data"), a)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	_ = wait.Poll(5*time.Second, func() bool { return len(nh.Sent()) >= n }) // the count is checked below
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	sent := nh.Sent()
	if len(sent) != n {
		t.Fatalf("sent %d packets, want %d", len(sent), n)
	}
	if c := nh.SendCalls(); c.SendEx != 1 || c.Send != 0 {
		t.Errorf("send calls %+v, want one SendEx for the batch", c)
	}
	for _, s := range sent {
		if !s.Addr.Outbound() || !s.Addr.Impostor() {
			t.Errorf("passed packet lost its direction or Impostor flag: outbound %v impostor %v", s.Addr.Outbound(), s.Addr.Impostor())
		}
	}
}
