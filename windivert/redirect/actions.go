package redirect

import (
	"net/netip"

	dnssrv "github.com/agentcage/router/dns"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/windivert/packet"
)

// apply does o to p, a packet of the flow o was decided for; what it sends goes into ob
// (nil: sent at once).
func (e *Engine) apply(ob *outbox, o outcome, p packet.Packet, m Meta) {
	switch o.act {
	case actPass:
		e.pass(ob, p.Bytes(), m)
	case actReflect:
		rewrite(p, o.peer, o.to, m.ChecksumsValid)
		e.send(ob, p.Bytes(), inbound(m))
	case actRefuse:
		e.refuse(ob, p, m)
	case actDrop:
		e.st.dropped.Add(1)
	case actDNS:
		e.answer(p, m, o.owner)
	case actRelay:
		e.relay(o, p)
	}
}

// inbound is the metadata for a packet the engine derives from one captured with m and
// injects into the host.
func inbound(m Meta) Meta {
	return Meta{ChecksumsValid: true, IfIdx: m.IfIdx, SubIfIdx: m.SubIfIdx}
}

// pass sends a captured packet on unchanged.
func (e *Engine) pass(ob *outbox, b []byte, m Meta) { e.send(ob, b, m) }

// refuse drops p and, for TCP, injects a RST to its sender.
func (e *Engine) refuse(ob *outbox, p packet.Packet, m Meta) {
	e.st.dropped.Add(1)
	if !p.IsTCP() {
		return
	}
	if rst := resetFor(p); rst != nil {
		e.send(ob, rst, inbound(m))
	}
}

// answer answers a DNS query p (UDP) of owner (the process that asks, as far as it is known)
// on a worker goroutine, or drops it when DNSWorkers answers are already running.
func (e *Engine) answer(p packet.Packet, m Meta, owner rules.Owner) {
	dns := e.opts.DNS
	if dns == nil {
		e.st.dropped.Add(1)
		return
	}
	select {
	case e.dnsSem <- struct{}{}:
	default:
		e.st.dropped.Add(1)
		e.log.Debug("dns query dropped: too many in progress", "src", netip.AddrPortFrom(p.Src(), p.SrcPort()))
		return
	}
	q := append([]byte(nil), p.Payload()...)
	client := netip.AddrPortFrom(p.Src(), p.SrcPort())
	server := netip.AddrPortFrom(p.Dst(), p.DstPort())
	e.workers.Go(func() {
		defer func() { <-e.dnsSem }()
		ans := dns.HandleWireFrom(e.ctx, dnssrv.Source{Addr: client.Addr(), Owner: owner}, q, true)
		if ans == nil {
			return
		}
		b, err := packet.Build(packet.Spec{Src: server, Dst: client, Proto: packet.ProtoUDP, Payload: ans})
		if err != nil {
			e.log.Debug("dns reply", "err", err)
			return
		}
		e.st.dnsAnswered.Add(1)
		e.write(b, inbound(m))
	})
}

// outbox holds what the goroutine handling one read batch sends, so that a BatchDevice
// sends it with one call when the batch is done (see flush). The packets alias the read
// buffer or are the engine's own; they are sent before the buffer is read into again.
type outbox struct {
	pkts  [][]byte
	metas []Meta
}

// send queues b in ob, or writes it at once when ob is nil (worker goroutines).
func (e *Engine) send(ob *outbox, b []byte, m Meta) {
	if ob == nil {
		e.write(b, m)
		return
	}
	ob.pkts = append(ob.pkts, b)
	ob.metas = append(ob.metas, m)
}

// flush sends what ob holds: with one WriteBatch call on a BatchDevice, else one Write
// per packet. ob is empty afterwards.
func (e *Engine) flush(ob *outbox) {
	if len(ob.pkts) == 0 {
		return
	}
	if bd, ok := e.dev.(BatchDevice); ok {
		n, err := bd.WriteBatch(ob.pkts, ob.metas)
		if err != nil {
			e.st.writeErrors.Add(uint64(len(ob.pkts) - n))
			e.log.Debug("device batch write", "packets", len(ob.pkts), "sent", n, "err", err)
		}
	} else {
		for i, b := range ob.pkts {
			e.write(b, ob.metas[i])
		}
	}
	clear(ob.pkts) // drop the references to the read buffer
	ob.pkts, ob.metas = ob.pkts[:0], ob.metas[:0]
}

// write hands b to the device, counting failures.
func (e *Engine) write(b []byte, m Meta) {
	err := e.dev.Write(b, m)
	switch {
	case err == nil:
	case err == ErrCannotPass:
		e.st.cannotPass.Add(1)
		e.st.dropped.Add(1)
	default:
		e.st.writeErrors.Add(1)
		e.log.Debug("device write", "outbound", m.Outbound, "bytes", len(b), "err", err)
	}
}
