package redirect

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/windivert/packet"
)

// nullDev discards what is written.
type nullDev struct{}

func (nullDev) Read([]byte, []Meta) (int, int, error) { select {} }
func (nullDev) Write([]byte, Meta) error              { return nil }
func (nullDev) Close() error                          { return nil }

func benchEngine(b *testing.B) *Engine {
	e, err := New(nullDev{}, testRules(b), Options{ListenerPort: lport})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// BenchmarkEngine measures the engine's cost per packet on the paths of a reflected flow
// (the app's data to the listener, the listener's data back to the app) and per new flow.
// Each iteration copies the template packet into the read buffer first (the rewrite is in
// place), which is part of the figure (~30 ns for 1400 bytes).
func BenchmarkEngine(b *testing.B) {
	payload := strings.Repeat("x", 1348) // 1400-byte packets with the 4-byte MSS option
	peer := netip.AddrPortFrom(proxied.Addr(), appA.Port())
	listener := netip.AddrPortFrom(appA.Addr(), lport)
	for _, c := range []struct {
		name  string
		pkt   []byte
		valid bool
	}{
		{"app-to-listener-1400B-incremental", tcpPkt(appA, proxied, ack, 2, 1, payload), true},
		{"app-to-listener-1400B-recompute", tcpPkt(appA, proxied, ack, 2, 1, payload), false},
		{"app-to-listener-64B-incremental", tcpPkt(appA, proxied, ack, 2, 1, ""), true},
		{"listener-to-app-1400B-incremental", tcpPkt(listener, peer, ack, 1, 2, payload), true},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := benchEngine(b)
			e.inputBatch(tcpPkt(appA, proxied, syn, 1, 0, ""), []Meta{outMeta})
			m := outMeta
			m.ChecksumsValid = c.valid
			metas := []Meta{m}
			buf := make([]byte, len(c.pkt))
			b.SetBytes(int64(len(c.pkt)))
			b.ReportAllocs()
			for b.Loop() {
				copy(buf, c.pkt)
				e.inputBatch(buf, metas)
			}
			if st := e.Stats(); st.Unknown != 0 || st.Dropped != 0 {
				b.Fatalf("stats %+v: packets were not on the reflected path", st)
			}
		})
	}
	b.Run("new-flow-syn-reflect", func(b *testing.B) {
		e := benchEngine(b)
		pkts := make([][]byte, 1024)
		for i := range pkts {
			pkts[i] = tcpPkt(netip.AddrPortFrom(appA.Addr(), uint16(20000+i)), proxied, syn, 1, 0, "")
		}
		buf := make([]byte, len(pkts[0]))
		metas := []Meta{outMeta}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			copy(buf, pkts[i%len(pkts)])
			e.inputBatch(buf, metas)
			i++
			e.mu.Lock()
			for _, f := range e.flows {
				e.removeLocked(f, 0)
			}
			clear(e.recent)
			e.mu.Unlock()
		}
	})
}

// BenchmarkRewrite is the rewrite alone (the NAT table excluded).
func BenchmarkRewrite(b *testing.B) {
	pkt := tcpPkt(appA, proxied, ack, 2, 1, strings.Repeat("x", 1348))
	to := netip.AddrPortFrom(appA.Addr(), lport)
	peer := netip.AddrPortFrom(proxied.Addr(), appA.Port())
	for _, valid := range []bool{true, false} {
		b.Run(map[bool]string{true: "incremental", false: "recompute"}[valid], func(b *testing.B) {
			buf := append([]byte(nil), pkt...)
			p, _ := packet.Parse(buf)
			b.SetBytes(int64(len(pkt)))
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					rewrite(p, peer, to, valid)
				} else {
					rewrite(p, appA, proxied, valid)
				}
			}
			if !p.ChecksumsValid() {
				b.Fatal("checksums invalid")
			}
		})
	}
}
