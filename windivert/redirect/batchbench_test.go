package redirect

import (
	"github.com/agentcage/router/windivert"
	"net/netip"
	"strings"
	"testing"
)

// BenchmarkBatch: one read batch of 64 packets through inputBatch, on the paths a host
// without caged traffic takes (passed TCP data of established flows, passed UDP), and the
// reflected path; ns/op is per batch, ns/pkt per packet.
func BenchmarkBatch(b *testing.B) {
	payload := strings.Repeat("x", 1348)
	for _, c := range []struct {
		name string
		mk   func(i int) []byte
		pre  func(e *Engine, i int)
	}{
		{"passed-tcp-64x1400B", func(i int) []byte {
			return tcpPkt(netip.AddrPortFrom(appA.Addr(), uint16(30000+i)), direct, ack, 2, 1, payload)
		}, func(e *Engine, i int) {
			e.inputBatch(tcpPkt(netip.AddrPortFrom(appA.Addr(), uint16(30000+i)), direct, syn, 1, 0, ""), []Meta{outMeta})
		}},
		{"passed-udp-64x1200B", func(i int) []byte {
			return udpPkt(netip.AddrPortFrom(appA.Addr(), uint16(30000+i)), direct, payload[:1200])
		}, nil},
		{"reflected-tcp-64x1400B", func(i int) []byte {
			return tcpPkt(netip.AddrPortFrom(appA.Addr(), uint16(30000+i)), proxied, ack, 2, 1, payload)
		}, func(e *Engine, i int) {
			e.inputBatch(tcpPkt(netip.AddrPortFrom(appA.Addr(), uint16(30000+i)), proxied, syn, 1, 0, ""), []Meta{outMeta})
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := benchEngine(b)
			var tmpl []byte
			metas := make([]Meta, 64)
			for i := range 64 {
				if c.pre != nil {
					c.pre(e, i)
				}
				tmpl = append(tmpl, c.mk(i)...)
				metas[i] = outMeta
			}
			buf := make([]byte, len(tmpl))
			b.ReportAllocs()
			for b.Loop() {
				copy(buf, tmpl)
				e.inputBatch(buf, metas)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/pkt")
			if st := e.Stats(); st.Unknown != 0 || st.Dropped != 0 {
				b.Fatalf("stats %+v", st)
			}
		})
	}
}

// countDriver is a windivert.Driver that only counts the packets and calls of sends.
type countDriver struct {
	windivert.Driver // nil: other calls panic
	sends, packets   int
}

func (d *countDriver) Send(_ uintptr, pkt []byte, _ *windivert.Address) (int, error) {
	d.sends++
	d.packets++
	return len(pkt), nil
}

func (d *countDriver) SendEx(_ uintptr, buf []byte, addrs []windivert.Address) (int, error) {
	d.sends++
	d.packets += len(addrs)
	return len(buf), nil
}

func (d *countDriver) Open(string, windivert.Layer, int16, windivert.Flag) (uintptr, error) {
	return 1, nil
}
func (d *countDriver) GetParam(uintptr, windivert.Param) (uint64, error) { return 2, nil }
func (d *countDriver) SetParam(uintptr, windivert.Param, uint64) error   { return nil }

// BenchmarkBatchWinDivert: the same passed TCP batch through the WinDivert device (address
// building and the sends), with the driver's calls counted: sends/batch is what crosses
// into the kernel per read batch.
func BenchmarkBatchWinDivert(b *testing.B) {
	payload := strings.Repeat("x", 1348)
	drv := &countDriver{}
	dev, err := OpenWinDivert(drv, testWinDivertConfig())
	if err != nil {
		b.Fatal(err)
	}
	e, err := New(dev, testRules(b), Options{ListenerPort: lport})
	if err != nil {
		b.Fatal(err)
	}
	var tmpl []byte
	metas := make([]Meta, 64)
	for i := range 64 {
		src := netip.AddrPortFrom(appA.Addr(), uint16(30000+i))
		e.inputBatch(tcpPkt(src, direct, syn, 1, 0, ""), []Meta{outMeta})
		tmpl = append(tmpl, tcpPkt(src, direct, ack, 2, 1, payload)...)
		metas[i] = outMeta
	}
	buf := make([]byte, len(tmpl))
	drv.sends, drv.packets = 0, 0
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, tmpl)
		e.inputBatch(buf, metas)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/pkt")
	b.ReportMetric(float64(drv.sends)/float64(b.N), "sends/batch")
}
