package redirect

import (
	"net/netip"
	"testing"
	"time"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/windivert/packet"
)

// fuzzSeeds are packets of every kind the engine tells apart.
func fuzzSeeds() [][]byte {
	ap := netip.MustParseAddrPort
	frag := packet.MustBuild(spec{Src: appA, Dst: dnsSrv, Proto: packet.ProtoUDP, Payload: []byte("frag")})
	frag[6] |= 0x20 // MF: a first fragment
	p, _ := packet.Parse(frag)
	p.ComputeChecksums()
	return [][]byte{
		tcpPkt(appA, proxied, syn, 1, 0, ""),
		tcpPkt(appA, blocked, syn, 1, 0, ""),
		tcpPkt(appA, direct, syn, 1, 0, ""),
		tcpPkt(appA, poolDst, syn, 1, 0, ""),
		tcpPkt(appA, ap("203.0.113.10:853"), syn, 1, 0, ""),
		tcpPkt(appA, ap("203.0.113.53:53"), syn, 1, 0, ""),
		tcpPkt(appA6, proxied6, syn, 1, 0, ""),
		tcpPkt(appA, proxied, ack|packet.TCPPsh, 2, 1, "GET /"),
		tcpPkt(appA, proxied, finAck, 2, 1, ""),
		tcpPkt(appA, proxied, packet.TCPRst, 2, 0, ""),
		tcpPkt(ap("192.0.2.1:47100"), ap("203.0.113.10:50123"), synAck, 9, 2, ""),
		tcpPkt(appA, direct, synAck, 1, 1, ""),
		udpPkt(appA, dnsSrv, "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03www\x00\x00\x01\x00\x01"),
		udpPkt(appA, proxied, "quic"),
		udpPkt(appA6, ap("[2001:db8:113::53]:53"), "\x00\x01\x01\x00"),
		packet.MustBuild(spec{Src: appA6, Dst: proxied6, Proto: packet.ProtoTCP, TCPFlags: syn, ExtHeaders: []uint8{packet.ProtoHopByHop, packet.ProtoDestOpts}}),
		frag,
		append(tcpPkt(appA, proxied, syn, 1, 0, ""), udpPkt(appA, dnsSrv, "\x00\x02\x01\x00")...), // a batch of two
		{0x45, 0, 0, 20},
		echoPkt(appA.Addr(), proxied.Addr()),
		echoPkt(appA6.Addr(), proxied6.Addr()),
	}
}

// FuzzEngineInput feeds arbitrary bytes to the engine's packet intake (a batch, with
// metadata bits from flags), a connect event for the packet's tuple, the listener's answer
// to every reflected packet, then lets the timers and expiry run. Properties: no panic;
// every packet the engine writes parses, and has valid checksums when its metadata says so
// (the input's metadata tells the truth); the table stays within its bound.
func FuzzEngineInput(f *testing.F) {
	for i, s := range fuzzSeeds() {
		f.Add(s, uint8(i*37), uint8(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, flags, pid uint8) {
		own := uint32(99)
		tbl := testRules(t, appRule("curl.exe", rules.Proxy), rules.Rule{Name: "n", Hosts: []rules.Host{{Kind: rules.HostName, Name: "x.example"}}, Action: rules.Block})
		opts := Options{
			ListenerPort: lport, DNSPort: 47153, DNS: &fakeDNS{},
			Names:         &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{direct.Addr(): "x.example"}},
			Resolver:      &fakeResolver{infos: map[uint32]rules.Owner{4: {PID: 4, App: "curl.exe"}}},
			Lookup:        (&fakeLookup{owners: map[netip.AddrPort]rules.Owner{appA: {PID: 5, App: "curl.exe"}}}).lookup,
			OwnPIDs:       []uint32{own},
			MaxFlows:      8,
			ReflectDirect: flags&0x10 != 0,
		}
		if flags&0x20 != 0 {
			opts.Events = newFakeEvents()
		}
		if flags&0x40 != 0 {
			opts.ReflectTo = []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:ffff::1")}
		}
		e, dev, clk := newTest(t, flags&0x80 == 0, tbl, opts)

		// Metadata per packet of the batch; ChecksumsValid tells the truth.
		var metas []Meta
		for b := data; len(b) > 0 && len(metas) < 4; {
			m := Meta{Outbound: flags&1 == 0, Loopback: flags&2 != 0, IfIdx: uint32(pid)}
			p, err := packet.Parse(b)
			if err == nil {
				m.ChecksumsValid = flags&4 == 0 && p.ChecksumsValid()
			}
			metas = append(metas, m)
			if err != nil {
				break
			}
			b = b[p.Len():]
		}
		if flags&8 != 0 {
			if p, err := packet.Parse(data); err == nil && p.HasPorts() {
				e.Event(SocketEvent{Kind: EventConnect, Proto: p.Protocol(), Local: netip.AddrPortFrom(p.Src(), p.SrcPort()),
					Remote: netip.AddrPortFrom(p.Dst(), p.DstPort()), PID: uint32(pid % 8)})
			}
		}
		if len(metas) == 0 {
			metas = []Meta{{Outbound: true}}
		}
		e.inputBatch(append([]byte(nil), data...), metas)
		e.workers.Wait()
		clk.Advance(time.Second)
		e.workers.Wait()

		check := func(ws []written) {
			for _, w := range ws {
				p, err := packet.Parse(w.b)
				if err != nil {
					t.Fatalf("engine wrote an unparsable packet %x: %v", w.b, err)
				}
				if w.m.ChecksumsValid && !p.ChecksumsValid() {
					t.Fatalf("engine wrote a packet with invalid checksums but claims them valid: %x", w.b)
				}
				if w.m.Outbound {
					continue
				}
				// Answer reflected packets as the listener would.
				if p.IsTCP() && (p.DstPort() == lport || p.DstPort() == 47153) && p.TCPFlags()&packet.TCPRst == 0 {
					reply, err := packet.Build(spec{Src: netip.AddrPortFrom(p.Dst(), p.DstPort()), Dst: netip.AddrPortFrom(p.Src(), p.SrcPort()),
						Proto: packet.ProtoTCP, TCPFlags: synAck | packet.TCPFin, Seq: 7, Ack: p.Seq() + 1})
					if err == nil { // Build refuses IPv6 packets with IPv4-mapped addresses
						e.inputBatch(reply, []Meta{{Outbound: true, ChecksumsValid: true}})
					}
				}
			}
		}
		ws := dev.take()
		check(ws)
		e.workers.Wait()
		check(dev.take())
		clk.Advance(3 * time.Hour)
		e.mu.Lock()
		e.sweepLocked(e.now())
		e.mu.Unlock()
		e.workers.Wait()
		check(dev.take())
		if st := e.Stats(); st.Active > 8 {
			t.Fatalf("%d entries, bound 8", st.Active)
		}
	})
}
