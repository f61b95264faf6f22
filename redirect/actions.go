package redirect

import (
	"net/netip"

	dnssrv "github.com/agentcage/router/dns"
	"github.com/agentcage/router/packet"
)

// apply does o to p, a packet of the flow o was decided for.
func (e *Engine) apply(o outcome, p packet.Packet, m Meta) {
	switch o.act {
	case actPass:
		e.pass(p.Bytes(), m)
	case actReflect:
		rewrite(p, o.peer, o.to, m.ChecksumsValid)
		e.write(p.Bytes(), inbound(m))
	case actRefuse:
		e.refuse(p, m)
	case actDrop:
		e.st.dropped.Add(1)
	case actDNS:
		e.answer(p, m, o.app)
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
func (e *Engine) pass(b []byte, m Meta) { e.write(b, m) }

// refuse drops p and, for TCP, injects a RST to its sender.
func (e *Engine) refuse(p packet.Packet, m Meta) {
	e.st.dropped.Add(1)
	if !p.IsTCP() {
		return
	}
	if rst := resetFor(p); rst != nil {
		e.write(rst, inbound(m))
	}
}

// answer answers a DNS query p (UDP) of app ("" when unknown) on a worker goroutine, or
// drops it when DNSWorkers answers are already running.
func (e *Engine) answer(p packet.Packet, m Meta, app string) {
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
		ans := dns.HandleWireFrom(e.ctx, dnssrv.Source{Addr: client.Addr(), App: app}, q, true)
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
