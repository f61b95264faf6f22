package redirect

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/windivert/packet"
)

// fakeRelay records what the engine hands it.
type fakeRelay struct {
	mu   sync.Mutex
	got  []UDPFlow
	data []string
}

func (r *fakeRelay) RelayUDP(f UDPFlow, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, f)
	r.data = append(r.data, string(p))
}

func (r *fakeRelay) take() ([]UDPFlow, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, d := r.got, r.data
	r.got, r.data = nil, nil
	return g, d
}

// TestUDPRelay: with Options.UDP, proxied UDP and UDP to a fake IP are handed to the relay,
// datagram after datagram, with the owner when known; direct passes, block drops; the
// relay's answers are injected inbound from the destination, on the flow's interface.
func TestUDPRelay(t *testing.T) {
	relay := &fakeRelay{}
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{poolDst.Addr(): "fine.example"}}
	lookup := &fakeLookup{owners: map[netip.AddrPort]rules.Owner{appA: {PID: 42, App: "VBoxHeadless.exe"}}}
	e, dev, _ := newTest(t, true, testRules(t, appRule("VBoxHeadless.exe", rules.Proxy)), Options{Names: names, UDP: relay, Lookup: lookup.lookup})
	for _, c := range []struct {
		name  string
		src   netip.AddrPort
		dst   netip.AddrPort
		want  string // "relay", "pass", "drop"
		owner string
	}{
		{"proxied by address", netip.AddrPortFrom(appA.Addr(), 40001), proxied, "relay", ""},
		{"fake IP", netip.AddrPortFrom(appA.Addr(), 40002), poolDst, "relay", ""},
		{"caged app", appA, direct, "relay", "VBoxHeadless.exe"},
		{"direct", netip.AddrPortFrom(appA.Addr(), 40003), direct, "pass", ""},
		{"blocked", netip.AddrPortFrom(appA.Addr(), 40004), blocked, "drop", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i := range 2 {
				send(e, udpPkt(c.src, c.dst, "quic"), outMeta)
				ps := decode(t, dev.take())
				flows, data := relay.take()
				switch c.want {
				case "relay":
					if len(ps) != 0 || len(flows) != 1 || data[0] != "quic" || flows[0].Src != c.src || flows[0].Dst != c.dst {
						t.Fatalf("datagram %d: wrote %v, relayed %+v %q; want it relayed", i, ps, flows, data)
					}
					if flows[0].Owner.App != c.owner || flows[0].OwnerKnown != (c.owner != "") {
						t.Errorf("owner %+v known %v, want %q", flows[0].Owner, flows[0].OwnerKnown, c.owner)
					}
				case "pass":
					if len(ps) != 1 || !ps[0].m.Outbound || len(flows) != 0 {
						t.Fatalf("wrote %v, relayed %+v; want it passed", ps, flows)
					}
				case "drop":
					if len(ps) != 0 || len(flows) != 0 {
						t.Fatalf("wrote %v, relayed %+v; want it dropped", ps, flows)
					}
				}
			}
		})
	}

	src := netip.AddrPortFrom(appA.Addr(), 40001)
	if err := e.ReplyUDP(src, proxied, []byte("answer")); err != nil {
		t.Fatal(err)
	}
	ps := decode(t, dev.take())
	if len(ps) != 1 || ps[0].m.Outbound || ps[0].src != proxied || ps[0].dst != src || ps[0].payload != "answer" ||
		ps[0].proto != packet.ProtoUDP || ps[0].m.IfIdx != outMeta.IfIdx || ps[0].m.SubIfIdx != outMeta.SubIfIdx {
		t.Errorf("reply wrote %+v, want one inbound datagram %v -> %v on the flow's interface", ps, proxied, src)
	}
	if err := e.ReplyUDP(src, blocked, []byte("x")); err == nil {
		t.Error("a reply for a flow that was not relayed was injected")
	}
	if err := e.ReplyUDP(netip.AddrPortFrom(appA.Addr(), 40003), direct, []byte("x")); err == nil {
		t.Error("a reply for a passed flow was injected")
	}
	if st := e.Stats(); st.UDPRelayed != 6 {
		t.Errorf("stats %+v, want 6 datagrams relayed", st)
	}
}

// TestUDPRelayExpires: a relayed flow that goes quiet expires like any UDP decision; its
// answers are refused after that, and its next datagram is decided anew.
func TestUDPRelayExpires(t *testing.T) {
	relay := &fakeRelay{}
	e, dev, clk := newTest(t, true, testRules(t), Options{UDP: relay, UDPIdle: time.Minute})
	send(e, udpPkt(appA, proxied, "1"), outMeta)
	clk.Advance(2 * time.Minute)
	e.mu.Lock()
	e.sweepLocked(e.now())
	e.mu.Unlock()
	if err := e.ReplyUDP(appA, proxied, []byte("late")); err == nil {
		t.Error("an answer to an expired flow was injected")
	}
	dev.take()
	send(e, udpPkt(appA, proxied, "2"), outMeta)
	if flows, _ := relay.take(); len(flows) != 2 {
		t.Errorf("relayed %d datagrams, want 2", len(flows))
	}
}
