package redirect

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/clock/clocktest"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
	"github.com/agentcage/router/windivert/packet"
)

const (
	syn    = packet.TCPSyn
	synAck = packet.TCPSyn | packet.TCPAck
	ack    = packet.TCPAck
	finAck = packet.TCPFin | packet.TCPAck
	rstAck = packet.TCPRst | packet.TCPAck
)

// TestReflectAndReply: a proxied SYN becomes D:pa -> A:L inbound; the listener's answer
// becomes D:pd -> A:pa inbound; the app's next packets follow the mapping; OriginalDst and
// Flow give the original destination. Checksums stay valid both ways, whether the device
// vouched for them (incremental update) or not (recomputed).
func TestReflectAndReply(t *testing.T) {
	for _, valid := range []bool{true, false} {
		name := map[bool]string{true: "incremental", false: "recomputed"}[valid]
		t.Run(name, func(t *testing.T) {
			e, dev, _ := newTest(t, true, testRules(t), Options{})
			m := outMeta
			m.ChecksumsValid = valid
			b := tcpPkt(appA, proxied, syn, 1000, 0, "")
			if !valid { // checksum offload: the captured TCP checksum is garbage
				p, _ := packet.Parse(b)
				b[p.TransportOffset()+16] ^= 0x5a
			}
			send(e, b, m)
			got := wantOne(t, dev)
			peer := netip.AddrPortFrom(proxied.Addr(), appA.Port())
			listener := netip.AddrPortFrom(appA.Addr(), lport)
			if got.src != peer || got.dst != listener || got.m.Outbound || got.flags != syn || got.seq != 1000 {
				t.Fatalf("reflected SYN = %v flags %#x seq %d, want in %v->%v SYN seq 1000", got, got.flags, got.seq, peer, listener)
			}
			if got.m.IfIdx != 7 || got.m.SubIfIdx != 1 {
				t.Errorf("reflected SYN on interface %d.%d, want the captured 7.1", got.m.IfIdx, got.m.SubIfIdx)
			}

			// The listener answers the peer.
			send(e, tcpPkt(listener, peer, synAck, 5000, 1001, ""), outMeta)
			got = wantOne(t, dev)
			if got.src != proxied || got.dst != appA || got.m.Outbound || got.flags != synAck || got.seq != 5000 || got.ack != 1001 {
				t.Fatalf("reply = %v flags %#x seq %d ack %d, want in %v->%v SYN-ACK 5000/1001", got, got.flags, got.seq, got.ack, proxied, appA)
			}

			// The app's data follows the mapping.
			send(e, tcpPkt(appA, proxied, ack|packet.TCPPsh, 1001, 5001, "GET / HTTP/1.1\r\n\r\n"), m)
			got = wantOne(t, dev)
			if got.src != peer || got.dst != listener || got.payload != "GET / HTTP/1.1\r\n\r\n" {
				t.Fatalf("data = %v %q, want %v->%v with the payload", got, got.payload, peer, listener)
			}

			fi, ok := e.Flow(peer)
			if !ok || fi.Src != appA || fi.Dst != proxied || fi.Verdict.Name != "proxy" {
				t.Fatalf("Flow(%v) = %+v, %v; want %v -> %v by rule proxy", peer, fi, ok, appA, proxied)
			}
			if st := e.Stats(); st.Reflected != 1 || st.Active != 1 {
				t.Errorf("stats %+v, want 1 reflected, 1 active", st)
			}
		})
	}
}

// TestBlockResets: a blocked SYN is dropped and the app gets a RST+ACK from the
// destination acknowledging its SYN; nothing stays in the table.
func TestBlockResets(t *testing.T) {
	e, dev, _ := newTest(t, true, testRules(t), Options{})
	send(e, tcpPkt(appA, blocked, syn, 777, 0, ""), outMeta)
	got := wantOne(t, dev)
	if got.src != blocked || got.dst != appA || got.m.Outbound || got.flags != rstAck || got.ack != 778 {
		t.Fatalf("answer = %v flags %#x ack %d, want in %v->%v RST+ACK ack 778", got, got.flags, got.ack, blocked, appA)
	}
	if st := e.Stats(); st.Refused != 1 || st.Active != 0 {
		t.Errorf("stats %+v, want 1 refused, table empty", st)
	}
	if r := e.Refusals(); len(r) != 1 || r[0].Reason != refusal.Rule || r[0].Count != 1 || r[0].Recent[0].Dst != blocked || r[0].Recent[0].Rule != "block" {
		t.Errorf("refusals %+v, want one by rule block to %v", r, blocked)
	}
}

// TestDirect: a direct verdict passes the SYN unchanged (and later packets); with
// ReflectDirect (a TUN) it is reflected instead.
func TestDirect(t *testing.T) {
	t.Run("pass", func(t *testing.T) {
		e, dev, _ := newTest(t, true, testRules(t), Options{})
		b := tcpPkt(appA, direct, syn, 1, 0, "")
		send(e, b, outMeta)
		got := wantOne(t, dev)
		if got.src != appA || got.dst != direct || !got.m.Outbound || got.m != outMeta {
			t.Fatalf("got %v meta %+v, want the SYN passed as captured", got, got.m)
		}
		send(e, tcpPkt(appA, direct, ack, 2, 1, "x"), outMeta)
		if got := wantOne(t, dev); !got.m.Outbound || got.dst != direct {
			t.Fatalf("data of a passed flow: %v", got)
		}
	})
	t.Run("reflect-direct", func(t *testing.T) {
		e, dev, _ := newTest(t, false, testRules(t), Options{ReflectDirect: true})
		send(e, tcpPkt(appA, direct, syn, 1, 0, ""), outMeta)
		got := wantOne(t, dev)
		if got.m.Outbound || got.dst.Port() != lport {
			t.Fatalf("got %v, want reflected to the listener", got)
		}
	})
}

// TestSynHold covers the two orders of SYN and CONNECT event, the fallback after the
// bounded wait, and the owner reaching the rules and Owner.
func TestSynHold(t *testing.T) {
	const pid = 4242
	curl := rules.Owner{PID: pid, App: "curl.exe", AppPath: `C:\tools\curl.exe`}
	tbl := testRules(t, appRule("curl.exe", rules.Proxy))
	connect := SocketEvent{Kind: EventConnect, Proto: packet.ProtoTCP, Local: appA, Remote: direct, PID: pid}
	newEngine := func(t *testing.T, lookup LookupFunc) (*Engine, *fakeDev, *clocktest.Clock) {
		return newTest(t, true, tbl, Options{
			Events:   newFakeEvents(),
			Resolver: &fakeResolver{infos: map[uint32]rules.Owner{pid: curl}},
			Lookup:   lookup,
		})
	}
	wantReflectedCurl := func(t *testing.T, e *Engine, dev *fakeDev) {
		t.Helper()
		got := wantOne(t, dev)
		peer := netip.AddrPortFrom(direct.Addr(), appA.Port())
		if got.m.Outbound || got.src != peer {
			t.Fatalf("got %v, want the SYN reflected (curl.exe is proxied)", got)
		}
		info, err := e.Owner(peer, direct)
		if err != nil || info.App != "curl.exe" || info.PID != pid {
			t.Fatalf("Owner = %+v, %v; want curl.exe %d", info, err, pid)
		}
	}

	t.Run("event-first", func(t *testing.T) {
		e, dev, _ := newEngine(t, nil)
		e.Event(connect)
		send(e, tcpPkt(appA, direct, syn, 1, 0, ""), outMeta)
		wantReflectedCurl(t, e, dev)
	})
	t.Run("syn-first", func(t *testing.T) {
		e, dev, _ := newEngine(t, nil)
		send(e, tcpPkt(appA, direct, syn, 1, 0, ""), outMeta)
		wantNone(t, dev) // held
		// A retransmitted SYN while pending is held too, not duplicated.
		send(e, tcpPkt(appA, direct, syn, 1, 0, ""), outMeta)
		wantNone(t, dev)
		e.Event(connect)
		e.workers.Wait()
		ps := decode(t, dev.take())
		if len(ps) != 2 || ps[0].m.Outbound || ps[1].m.Outbound {
			t.Fatalf("after the event: %v, want both held SYNs reflected", ps)
		}
		if info, err := e.Owner(ps[0].src, direct); err != nil || info.App != "curl.exe" {
			t.Fatalf("Owner = %+v, %v", info, err)
		}
	})
	t.Run("timeout-fallback", func(t *testing.T) {
		lk := &fakeLookup{owners: map[netip.AddrPort]rules.Owner{appA: curl}}
		e, dev, clk := newEngine(t, lk.lookup)
		send(e, tcpPkt(appA, direct, syn, 1, 0, ""), outMeta)
		clk.Advance(40 * time.Millisecond)
		wantNone(t, dev)
		clk.Advance(10 * time.Millisecond) // EventWait (50 ms) has passed
		e.workers.Wait()
		wantReflectedCurl(t, e, dev)
		if st := e.Stats(); st.EventTimeouts != 1 || lk.count() != 1 {
			t.Errorf("timeouts %d, lookups %d; want 1 and 1", st.EventTimeouts, lk.count())
		}
		// A late event changes nothing.
		e.Event(connect)
		wantNone(t, dev)
	})
	t.Run("held-then-blocked", func(t *testing.T) {
		e, dev, _ := newEngine(t, nil)
		send(e, tcpPkt(appA, blocked, syn, 30, 0, ""), outMeta)
		wantNone(t, dev)
		e.Event(SocketEvent{Kind: EventConnect, Proto: packet.ProtoTCP, Local: appA, Remote: blocked, PID: 7})
		e.workers.Wait()
		if got := wantOne(t, dev); got.flags != rstAck || got.ack != 31 || got.dst != appA {
			t.Fatalf("got %v flags %#x ack %d, want the held SYN answered with RST+ACK 31", got, got.flags, got.ack)
		}
	})
	t.Run("timeout-unknown-owner", func(t *testing.T) {
		e, dev, clk := newEngine(t, nil)
		send(e, tcpPkt(appA, direct, syn, 1, 0, ""), outMeta)
		clk.Advance(50 * time.Millisecond)
		e.workers.Wait()
		if got := wantOne(t, dev); !got.m.Outbound {
			t.Fatalf("got %v, want the SYN passed: unknown owner, default rule direct", got)
		}
	})
	t.Run("no-events-lookup", func(t *testing.T) {
		// Without an event source (a TUN), only rules with apps wait, for Lookup.
		lk := &fakeLookup{owners: map[netip.AddrPort]rules.Owner{appA: curl}}
		e, dev, _ := newTest(t, true, tbl, Options{Lookup: lk.lookup})
		send(e, tcpPkt(appA, direct, syn, 1, 0, ""), outMeta)
		wantReflectedCurl(t, e, dev)
		e2, dev2, _ := newTest(t, true, testRules(t), Options{Lookup: lk.lookup})
		send(e2, tcpPkt(appA, direct, syn, 1, 0, ""), outMeta)
		if got := wantOne(t, dev2); !got.m.Outbound || lk.count() != 1 {
			t.Fatalf("no app rules: got %v after %d lookups, want a pass without lookup", got, lk.count())
		}
	})
}

// fakeEvents is an EventSource that never delivers (the tests call Event directly).
type fakeEvents struct{ ch chan struct{} }

func newFakeEvents() *fakeEvents { return &fakeEvents{ch: make(chan struct{})} }

func (f *fakeEvents) ReadEvents([]SocketEvent) (int, error) {
	<-f.ch
	return 0, context.Canceled
}

// TestOwnTrafficAndLocal: the router's own flows, loopback and link-local pass untouched.
func TestOwnTrafficAndLocal(t *testing.T) {
	const own = 99
	e, dev, _ := newTest(t, true, testRules(t), Options{Events: newFakeEvents(), OwnPIDs: []uint32{own}})
	e.Event(SocketEvent{Kind: EventConnect, Proto: packet.ProtoTCP, Local: appA, Remote: proxied, PID: own})
	send(e, tcpPkt(appA, proxied, syn, 1, 0, ""), outMeta)
	if got := wantOne(t, dev); !got.m.Outbound || got.dst != proxied {
		t.Fatalf("own SYN: %v, want passed", got)
	}
	send(e, tcpPkt(appA, proxied, ack, 2, 1, "x"), outMeta)
	if got := wantOne(t, dev); !got.m.Outbound {
		t.Fatalf("own data: %v, want passed", got)
	}
	for _, c := range []struct {
		name string
		dst  netip.AddrPort
		m    Meta
	}{
		{"loopback-flag", proxied, Meta{Outbound: true, Loopback: true, ChecksumsValid: true}},
		{"loopback-addr", netip.MustParseAddrPort("127.0.0.1:47831"), outMeta},
		{"link-local", netip.MustParseAddrPort("169.254.1.1:80"), outMeta},
		{"multicast", netip.MustParseAddrPort("224.0.0.251:5353"), outMeta},
	} {
		t.Run(c.name, func(t *testing.T) {
			send(e, tcpPkt(netip.MustParseAddrPort("192.0.2.10:40000"), c.dst, syn, 1, 0, ""), c.m)
			if got := wantOne(t, dev); !got.m.Outbound || got.dst != c.dst {
				t.Fatalf("got %v, want passed unchanged", got)
			}
		})
	}
	if st := e.Stats(); st.Reflected != 0 {
		t.Errorf("%d flows reflected, want none", st.Reflected)
	}
}

// TestDNS: UDP 53 is answered in process and injected inbound from the server the app
// asked; TCP 53 is reflected to the DNS port; DoT leaves only through a proxy (reflected
// to the router), and is refused otherwise (policy.StepDoT).
func TestDNS(t *testing.T) {
	d := &fakeDNS{}
	e, dev, _ := newTest(t, true, testRules(t), Options{DNS: d, DNSPort: 47153})
	q := "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
	send(e, udpPkt(appA, dnsSrv, q), outMeta)
	got := wantOne(t, dev)
	if got.src != dnsSrv || got.dst != appA || got.m.Outbound || got.payload != "\x12\x34\x81\x80answer" || got.proto != packet.ProtoUDP {
		t.Fatalf("answer %v %q, want in %v->%v with the reply", got, got.payload, dnsSrv, appA)
	}
	// A second query on the same socket goes straight to the handler.
	send(e, udpPkt(appA, dnsSrv, "\x00\x07"+q[2:]), outMeta)
	if got := wantOne(t, dev); got.payload[:2] != "\x00\x07" {
		t.Fatalf("second answer %q", got.payload)
	}
	// A link-local resolver is answered too (it could forward names anywhere).
	ll := netip.MustParseAddrPort("[fe80::1]:53")
	send(e, udpPkt(netip.MustParseAddrPort("[fe80::10]:5000"), ll, q), outMeta)
	if got := wantOne(t, dev); got.src != ll || got.m.Outbound {
		t.Fatalf("link-local resolver: %v, want answered", got)
	}
	if st := e.Stats(); st.DNSAnswered != 3 {
		t.Errorf("answered %d, want 3", st.DNSAnswered)
	}

	t.Run("tcp", func(t *testing.T) {
		send(e, tcpPkt(appA, netip.AddrPortFrom(dnsSrv.Addr(), 53), syn, 1, 0, ""), outMeta)
		got := wantOne(t, dev)
		if got.m.Outbound || got.dst.Port() != 47153 {
			t.Fatalf("TCP DNS: %v, want reflected to port 47153", got)
		}
		// The DNS server's answer comes back from port 53.
		send(e, tcpPkt(got.dst, got.src, synAck, 9, 2, ""), outMeta)
		if got := wantOne(t, dev); got.src.Port() != 53 || got.dst != appA {
			t.Fatalf("TCP DNS reply: %v", got)
		}
	})
	t.Run("dot", func(t *testing.T) {
		for i, c := range []struct {
			dst       netip.AddrPort
			wantFlags uint8
			wantPort  uint16 // where the answer goes: the listener (reflected) or the app
		}{
			{netip.AddrPortFrom(proxied.Addr(), 853), syn, 47100},
			{netip.AddrPortFrom(blocked.Addr(), 853), rstAck, 40002},
			{netip.AddrPortFrom(direct.Addr(), 853), rstAck, 40003},
		} {
			src := netip.AddrPortFrom(netip.MustParseAddr("192.0.2.10"), 40000+uint16(i)+1)
			send(e, tcpPkt(src, c.dst, syn, 1, 0, ""), outMeta)
			if got := wantOne(t, dev); got.flags != c.wantFlags || got.m.Outbound || got.dst.Port() != c.wantPort {
				t.Errorf("DoT to %v: %v flags %#x, want %#x to port %d", c.dst, got, got.flags, c.wantFlags, c.wantPort)
			}
		}
	})
	t.Run("no-handler", func(t *testing.T) {
		e, dev, _ := newTest(t, true, testRules(t), Options{})
		send(e, udpPkt(appA, dnsSrv, q), outMeta)
		wantNone(t, dev)
		send(e, tcpPkt(appA, netip.AddrPortFrom(dnsSrv.Addr(), 53), syn, 1, 0, ""), outMeta)
		if got := wantOne(t, dev); got.flags != rstAck {
			t.Fatalf("TCP DNS without a DNS port: %v, want refused", got)
		}
	})
}

// TestUDP: UDP passes for direct verdicts and is dropped for proxied, blocked and pool
// destinations, packet after packet.
func TestUDP(t *testing.T) {
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15")}
	e, dev, _ := newTest(t, true, testRules(t), Options{Names: names})
	for _, c := range []struct {
		dst  netip.AddrPort
		pass bool
	}{{direct, true}, {proxied, false}, {blocked, false}, {poolDst, false}} {
		for range 2 {
			send(e, udpPkt(appA, c.dst, "quic"), outMeta)
			ps := decode(t, dev.take())
			if c.pass && (len(ps) != 1 || !ps[0].m.Outbound) || !c.pass && len(ps) != 0 {
				t.Errorf("UDP to %v: wrote %v, want pass=%v", c.dst, ps, c.pass)
			}
		}
	}
	if st := e.Stats(); st.DroppedFlows != 3 || st.Passed != 1 {
		t.Errorf("stats %+v, want 3 dropped flows and 1 passed", st)
	}
	// Counted once per flow, not per datagram: the proxied one cannot be carried (this
	// host's own: local-udp), the blocked one by its rule, the pool address nobody was given
	// as such.
	want := map[refusal.Reason]uint64{refusal.Rule: 1, refusal.LocalUDP: 1, refusal.NoName: 1}
	got := map[refusal.Reason]uint64{}
	for _, r := range e.Refusals() {
		got[r.Reason] = r.Count
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("refusals %v, want %v", got, want)
	}
}

// TestNamesAndFinality: a pool address with a name reflects, one nobody was given is
// refused; a verdict that a host-name rule before it could change is not final (reflect
// TCP, drop UDP), unless the name is known.
func TestNamesAndFinality(t *testing.T) {
	// Rule 0 blocks an address, rule 1 a name: verdicts of rule 0 are final, later ones not.
	all := testRules(t).Rules()
	name := rules.Rule{Name: "by-name", Hosts: []rules.Host{{Kind: rules.HostName, Name: "blocked.example"}}, Action: rules.Block}
	tbl := testPolicy(append([]rules.Rule{all[0], name}, all[1:]...))
	named := netip.MustParseAddrPort("198.51.100.30:443")
	poolNamed := netip.MustParseAddrPort("198.18.0.77:443")
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{named.Addr(): "blocked.example", poolNamed.Addr(): "fine.example"}}
	e, dev, _ := newTest(t, true, tbl, Options{Names: names})
	for _, c := range []struct {
		name  string
		dst   netip.AddrPort
		proto uint8
		want  string // "reflect", "pass", "refuse", "drop"
	}{
		{"pool, nobody was given", poolDst, packet.ProtoTCP, "refuse"},
		{"pool, named", poolNamed, packet.ProtoTCP, "reflect"},
		{"pool, named, udp", poolNamed, packet.ProtoUDP, "drop"},
		{"direct-not-final", direct, packet.ProtoTCP, "reflect"},
		{"udp-direct-not-final", direct, packet.ProtoUDP, "drop"},
		{"named-block", named, packet.ProtoTCP, "refuse"},
		{"address-rule-before-names", blocked, packet.ProtoTCP, "refuse"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := netip.AddrPortFrom(appA.Addr(), uint16(41000+len(c.name)))
			b := tcpPkt(src, c.dst, syn, 1, 0, "")
			if c.proto == packet.ProtoUDP {
				b = udpPkt(src, c.dst, "x")
			}
			send(e, b, outMeta)
			ps := decode(t, dev.take())
			if got := did(ps, c.dst, c.proto == packet.ProtoTCP, 0); got != c.want {
				t.Errorf("got %s (%v), want %s", got, ps, c.want)
			}
		})
	}
}

// TestIPv6: reflection and reply rewrite with IPv6, to a configured IPv6 listener address.
func TestIPv6(t *testing.T) {
	x6 := netip.MustParseAddr("2001:db8:ffff::1")
	e, dev, _ := newTest(t, false, testRules(t), Options{ReflectTo: []netip.Addr{netip.MustParseAddr("192.0.2.1"), x6}})
	send(e, tcpPkt(appA6, proxied6, syn, 10, 0, ""), outMeta)
	got := wantOne(t, dev)
	peer := netip.AddrPortFrom(proxied6.Addr(), appA6.Port())
	to := netip.AddrPortFrom(x6, lport)
	if got.src != peer || got.dst != to || got.m.Outbound {
		t.Fatalf("reflected %v, want in %v->%v", got, peer, to)
	}
	send(e, tcpPkt(to, peer, synAck, 20, 11, ""), outMeta)
	if got := wantOne(t, dev); got.src != proxied6 || got.dst != appA6 {
		t.Fatalf("reply %v, want %v->%v", got, proxied6, appA6)
	}
	// A blocked IPv6 flow gets an IPv6 RST.
	blocked6 := rules.Rule{Name: "b6", Hosts: []rules.Host{{Kind: rules.HostRange, Range: rules.RangeOfPrefix(netip.MustParsePrefix("2001:db8:66::/48"))}}, Action: rules.Block}
	e2, dev2, _ := newTest(t, false, testRules(t, blocked6), Options{})
	dst := netip.MustParseAddrPort("[2001:db8:66::1]:443")
	send(e2, tcpPkt(appA6, dst, syn, 5, 0, ""), outMeta)
	if got := wantOne(t, dev2); got.flags != rstAck || got.src != dst || got.ack != 6 {
		t.Fatalf("IPv6 block: %v flags %#x ack %d", got, got.flags, got.ack)
	}
}

// TestExpiry: entries leave Linger after FIN both ways (counted from the last packet), or
// Idle without packets; the peer port of an expired flow is not reused for TimeWait; the
// table bound refuses new flows.
func TestExpiry(t *testing.T) {
	e, dev, clk := newTest(t, true, testRules(t), Options{Linger: 10 * time.Second, Idle: time.Hour, TimeWait: time.Minute})
	sweep := func() {
		e.mu.Lock()
		e.sweepLocked(e.now())
		e.mu.Unlock()
	}
	peer := netip.AddrPortFrom(proxied.Addr(), appA.Port())
	listener := netip.AddrPortFrom(appA.Addr(), lport)
	send(e, tcpPkt(appA, proxied, syn, 1, 0, ""), outMeta)
	send(e, tcpPkt(appA, proxied, finAck, 2, 1, ""), outMeta)
	send(e, tcpPkt(listener, peer, finAck, 1, 3, ""), outMeta)
	dev.take()
	clk.Advance(9 * time.Second)
	send(e, tcpPkt(appA, proxied, ack, 3, 2, ""), outMeta) // the last ACK refreshes
	clk.Advance(9 * time.Second)
	sweep()
	if _, ok := e.Flow(peer); !ok {
		t.Fatal("flow expired 9 s after its last packet, want Linger (10 s) after it")
	}
	clk.Advance(2 * time.Second)
	sweep()
	if _, ok := e.Flow(peer); ok {
		t.Fatal("closed flow still in the table after Linger")
	}
	// A late packet of it is unknown now: refused with a RST to the app.
	dev.take()
	send(e, tcpPkt(appA, proxied, ack, 3, 2, ""), outMeta)
	if got := wantOne(t, dev); got.flags != packet.TCPRst || got.seq != 2 {
		t.Fatalf("late packet: %v flags %#x seq %d, want RST seq 2", got, got.flags, got.seq)
	}
	// The same app port to the same destination within TimeWait gets another peer port.
	send(e, tcpPkt(appA, proxied, syn, 100, 0, ""), outMeta)
	if got := wantOne(t, dev); got.src == peer || got.src.Addr() != proxied.Addr() {
		t.Fatalf("reused tuple reflected from %v, want %v with another port", got.src, proxied.Addr())
	}

	t.Run("idle", func(t *testing.T) {
		e, dev, clk := newTest(t, true, testRules(t), Options{Idle: time.Hour, UDPIdle: time.Minute})
		send(e, tcpPkt(appA, proxied, syn, 1, 0, ""), outMeta)
		send(e, udpPkt(appA, direct, "x"), outMeta)
		dev.take()
		clk.Advance(61 * time.Second)
		e.mu.Lock()
		e.sweepLocked(e.now())
		e.mu.Unlock()
		if st := e.Stats(); st.Active != 1 {
			t.Fatalf("after 61 s: %d entries, want the TCP one only", st.Active)
		}
		clk.Advance(time.Hour)
		e.mu.Lock()
		e.sweepLocked(e.now())
		e.mu.Unlock()
		if st := e.Stats(); st.Active != 0 {
			t.Fatalf("after an idle hour: %d entries, want none", st.Active)
		}
	})
	t.Run("table-full", func(t *testing.T) {
		e, dev, _ := newTest(t, true, testRules(t), Options{MaxFlows: 2})
		for i := range 3 {
			send(e, tcpPkt(netip.AddrPortFrom(appA.Addr(), uint16(50000+i)), proxied, syn, 1, 0, ""), outMeta)
		}
		ps := decode(t, dev.take())
		if len(ps) != 3 || ps[2].flags != rstAck || e.Stats().TableFull != 1 {
			t.Fatalf("third flow: %v, stats %+v; want refused with table full", ps, e.Stats())
		}
	})
}

// TestUnknownAndServer: an outbound TCP segment of no known flow is refused; a SYN-ACK
// (the host serving a connection) passes, and so do the flow's later packets.
func TestUnknownAndServer(t *testing.T) {
	e, dev, _ := newTest(t, true, testRules(t), Options{})
	send(e, tcpPkt(appA, proxied, ack, 50, 60, "x"), outMeta)
	if got := wantOne(t, dev); got.flags != packet.TCPRst || got.seq != 60 || got.dst != appA {
		t.Fatalf("unknown segment: %v flags %#x seq %d", got, got.flags, got.seq)
	}
	send(e, tcpPkt(appA, proxied, packet.TCPRst, 50, 0, ""), outMeta)
	wantNone(t, dev) // a RST is not answered
	server := netip.AddrPortFrom(appA.Addr(), 3389)
	client := netip.MustParseAddrPort("198.51.100.99:50000")
	send(e, tcpPkt(server, client, synAck, 1, 2, ""), outMeta)
	send(e, tcpPkt(server, client, ack, 2, 2, "data"), outMeta)
	ps := decode(t, dev.take())
	if len(ps) != 2 || !ps[0].m.Outbound || !ps[1].m.Outbound {
		t.Fatalf("server flow: %v, want both passed", ps)
	}
	// AllowExisting keeps a connection older than the engine.
	e.AllowExisting(netip.MustParseAddrPort("192.0.2.10:55555"), proxied)
	send(e, tcpPkt(netip.MustParseAddrPort("192.0.2.10:55555"), proxied, ack, 1, 1, "x"), outMeta)
	if got := wantOne(t, dev); !got.m.Outbound {
		t.Fatalf("existing connection: %v, want passed", got)
	}
}

// TestPeerPortCollision: two apps (two local addresses, one port) to one destination get
// distinct peers, and each reply finds its app.
func TestPeerPortCollision(t *testing.T) {
	x := netip.MustParseAddr("192.0.2.1")
	e, dev, _ := newTest(t, false, testRules(t), Options{ReflectTo: []netip.Addr{x}})
	a1 := netip.MustParseAddrPort("192.0.2.10:40000")
	a2 := netip.MustParseAddrPort("10.0.2.15:40000")
	send(e, tcpPkt(a1, proxied, syn, 1, 0, ""), outMeta)
	send(e, tcpPkt(a2, proxied, syn, 1, 0, ""), outMeta)
	ps := decode(t, dev.take())
	if len(ps) != 2 || ps[0].src == ps[1].src {
		t.Fatalf("reflected %v, want two distinct peers", ps)
	}
	for i, a := range []netip.AddrPort{a1, a2} {
		send(e, tcpPkt(ps[i].dst, ps[i].src, synAck, 1, 2, ""), outMeta)
		if got := wantOne(t, dev); got.dst != a {
			t.Errorf("reply to peer %v went to %v, want %v", ps[i].src, got.dst, a)
		}
	}
}

// TestOriginalDst asks with a real accepted connection whose peer is in the table.
func TestOriginalDst(t *testing.T) {
	e, dev, _ := newTest(t, true, testRules(t), Options{})
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := e.OriginalDst(s); err == nil || !strings.Contains(err.Error(), "not a reflected connection") {
		t.Fatalf("OriginalDst of a stranger: %v", err)
	}
	// Reflect a flow, then give its entry the peer of the loopback connection.
	send(e, tcpPkt(appA, proxied, syn, 1, 0, ""), outMeta)
	dev.take()
	peer := unmapAP(c.LocalAddr().(*net.TCPAddr).AddrPort())
	e.mu.Lock()
	for p, f := range e.byPeer {
		delete(e.byPeer, p)
		f.peer, f.to = peer, unmapAP(s.LocalAddr().(*net.TCPAddr).AddrPort())
		e.byPeer[peer] = f
	}
	e.mu.Unlock()
	got, err := e.OriginalDst(s)
	if err != nil || got != proxied {
		t.Fatalf("OriginalDst = %v, %v; want %v", got, err, proxied)
	}
}

// TestDNSCarriesTheOwner: a DNS query the engine answers reaches the DNS server with the
// process that asks whole (its path and services, not its image name alone), so that the
// server's walls and refusals (dns.Walls.Caged, dns.Names.Refused) judge the query as the
// rules judge the process's connections: an app the rules cage by its path is caged there
// too. The engine handed on the image name alone, and the policy then took a process
// caged by path (or by service) for an uncaged one.
func TestDNSCarriesTheOwner(t *testing.T) {
	const path = `C:\vm\VirtualBoxVM.exe`
	owner := rules.Owner{PID: 42, App: "VirtualBoxVM.exe", AppPath: path}
	cfg := &conf.Config{Rules: []rules.Rule{appRule(path, rules.Proxy), {Name: "default", Action: rules.Direct}},
		DNS: conf.DNS{Mode: conf.DNSFakeIP, Capture: conf.DNSCaptureCaged, Pool: netip.MustParsePrefix("198.18.0.0/15")}}
	pol := policy.New(cfg, policy.Env{})
	d := &fakeDNS{}
	lk := &fakeLookup{owners: map[netip.AddrPort]rules.Owner{appA: owner}}
	e, dev, _ := newTest(t, true, pol, Options{Lookup: lk.lookup, DNS: d})
	send(e, udpPkt(appA, dnsSrv, "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"), outMeta)
	e.workers.Wait()
	if got := wantOne(t, dev); got.src != dnsSrv || got.dst != appA {
		t.Fatalf("answer %v, want from %v to %v", got, dnsSrv, appA)
	}
	srcs := d.sources()
	if len(srcs) != 1 {
		t.Fatalf("the DNS server was asked %d times, want once", len(srcs))
	}
	src := srcs[0]
	if src.Addr != appA.Addr() || src.App != owner.App || src.AppPath != path {
		t.Errorf("the DNS server was asked by %+v, want %v with the owner %+v", src, appA.Addr(), owner)
	}
	if f := (policy.Flow{Src: src.Addr, Owner: src.Owner}); !pol.Caged(&f) {
		t.Errorf("the query's owner %+v is not caged, though the rules cage its path", src.Owner)
	}
}

// TestRun runs the engine on its goroutine: packets in, packets out, a stop by context,
// the device closed, the workers gone.
func TestRun(t *testing.T) {
	dev := newFakeDev(true)
	d := &fakeDNS{}
	e, err := New(dev, testRules(t), Options{ListenerPort: lport, DNS: d})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	dev.in <- written{b: tcpPkt(appA, proxied, syn, 1, 0, ""), m: outMeta}
	dev.in <- written{b: udpPkt(appA, dnsSrv, "\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"), m: outMeta}
	var got []written
	_ = wait.Poll(5*time.Second, func() bool { got = append(got, dev.take()...); return len(got) >= 2 })
	if len(got) != 2 {
		t.Fatalf("wrote %d packets, want the reflected SYN and the DNS answer", len(got))
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run = %v, want nil after cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if !dev.closed {
		t.Error("device not closed by Run")
	}
	if err := e.Run(context.Background()); err == nil {
		t.Error("second Run succeeded")
	}
}

func TestNewChecks(t *testing.T) {
	if _, err := New(newFakeDev(true), nil, Options{}); err == nil {
		t.Error("New without a listener port succeeded")
	}
	if _, err := New(nil, nil, Options{ListenerPort: 1}); err == nil {
		t.Error("New without a device succeeded")
	}
	two := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}
	if _, err := New(newFakeDev(true), nil, Options{ListenerPort: 1, ReflectTo: two}); err == nil {
		t.Error("New with two IPv4 reflect addresses succeeded")
	}
}

// timedResolver knows when each process was created: a PID used by a process newer than
// the event that named it was reused, and its owner is not that process.
type timedResolver struct {
	fakeResolver
	created map[uint32]time.Time
}

func (r *timedResolver) ByPIDAt(pid uint32, at time.Time) (rules.Owner, error) {
	if c, ok := r.created[pid]; ok && c.After(at) {
		return rules.Owner{}, errors.New("pid reused")
	}
	return r.ByPID(pid)
}

// TestPIDReusedSinceTheEvent: a connect event names PID 4242, which by the time the engine
// asks belongs to a newer process (curl.exe, proxied): the flow is decided without an owner
// (the default rule, direct), not as curl's.
func TestPIDReusedSinceTheEvent(t *testing.T) {
	const pid = 4242
	seen := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name    string
		created time.Time
		want    string // "reflect" (curl's rule) or "pass" (no owner)
	}{
		{"same process", seen.Add(-time.Minute), "reflect"},
		{"reused since", seen.Add(time.Second), "pass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &timedResolver{fakeResolver: fakeResolver{infos: map[uint32]rules.Owner{pid: {PID: pid, App: "curl.exe"}}},
				created: map[uint32]time.Time{pid: tc.created}}
			e, dev, _ := newTest(t, true, testRules(t, appRule("curl.exe", rules.Proxy)), Options{Events: newFakeEvents(), Resolver: res})
			e.Event(SocketEvent{Kind: EventConnect, Proto: packet.ProtoTCP, Local: appA, Remote: direct, PID: pid, At: seen})
			send(e, tcpPkt(appA, direct, syn, 1, 0, ""), outMeta)
			e.workers.Wait()
			got := "reflect"
			if p := wantOne(t, dev); p.m.Outbound {
				got = "pass"
			}
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
