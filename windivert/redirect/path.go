package redirect

import (
	"net/netip"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
	"github.com/agentcage/router/windivert/packet"
)

// input handles one outbound packet; p may be rewritten in place and is not kept. What it
// sends goes into ob.
func (e *Engine) input(ob *outbox, p packet.Packet, m Meta, now int64) {
	e.st.packets.Add(1)
	if m.Outbound && !m.Loopback {
		if typ, code, ok := echoRequest(p); ok {
			e.icmp(ob, p, m, typ, code, now)
			return
		}
	}
	if !m.Outbound || m.Loopback || !p.HasPorts() {
		e.pass(ob, p.Bytes(), m)
		return
	}
	src := netip.AddrPortFrom(p.Src(), p.SrcPort())
	dst := netip.AddrPortFrom(p.Dst(), p.DstPort())
	if policy.IsLocal(dst.Addr()) && e.localPass(p, src, dst) {
		e.pass(ob, p.Bytes(), m)
		return
	}
	if p.IsTCP() {
		e.tcp(ob, p, m, src, dst, now)
	} else {
		e.udp(ob, p, m, src, dst, now)
	}
}

// localPass reports whether a packet to a local destination passes without any state: the
// policy says so and no owner could change it (DNS to a link-local resolver, say, is still
// answered, and with caged apps in the rules a flow waits for its owner like any other).
func (e *Engine) localPass(p packet.Packet, src, dst netip.AddrPort) bool {
	pf := policy.Flow{Network: rules.UDP, Src: src.Addr(), Dst: dst.Addr(), Port: dst.Port()}
	if p.IsTCP() {
		pf.Network = rules.TCP
	}
	pol := e.pol.Load()
	return !pol.NeedsOwner(&pf) && pol.Decide(&pf).Step == policy.StepLocal
}

func (e *Engine) isListenerPort(port uint16) bool {
	return port == e.opts.ListenerPort || (port == e.opts.DNSPort && port != 0)
}

func (e *Engine) tcp(ob *outbox, p packet.Packet, m Meta, src, dst netip.AddrPort, now int64) {
	fl := p.TCPFlags()
	e.mu.Lock()
	if e.isListenerPort(src.Port()) {
		if f := e.byPeer[dst]; f != nil && f.to == src {
			// The listener answering a reflected peer: back to the app, as from D:pd.
			f.track(fl, false, now)
			k := f.key
			e.mu.Unlock()
			rewrite(p, k.dst, k.src, m.ChecksumsValid)
			e.send(ob, p.Bytes(), inbound(m))
			return
		}
	}
	key := flowKey{proto: packet.ProtoTCP, src: src, dst: dst}
	syn := fl&(packet.TCPSyn|packet.TCPAck) == packet.TCPSyn
	if f := e.flows[key]; f != nil {
		if syn && f.closing {
			// The app reuses the 5-tuple for a new connection.
			e.removeLocked(f, now)
		} else {
			switch f.state {
			case stateReflect:
				f.track(fl, true, now)
				peer, to := f.peer, f.to
				e.mu.Unlock()
				rewrite(p, peer, to, m.ChecksumsValid)
				e.send(ob, p.Bytes(), inbound(m))
			case statePass:
				f.track(fl, true, now)
				e.mu.Unlock()
				e.pass(ob, p.Bytes(), m)
			default: // statePending
				if syn {
					f.hold(p, m)
				} else {
					e.st.dropped.Add(1)
				}
				e.mu.Unlock()
			}
			return
		}
	}
	switch {
	case syn:
		o := e.newFlowLocked(key, p, m, now)
		e.mu.Unlock()
		e.apply(ob, o, p, m)
	case fl&packet.TCPSyn != 0:
		// SYN-ACK: the host serves a connection; it is not the engine's to redirect. With
		// the host's share full it passes without an entry (its later packets are then
		// refused as unknown): the share protects the caged flows' room.
		if len(e.flows) < e.opts.MaxFlows && e.admitHostLocked() {
			f := &flow{key: key, state: statePass, created: now, last: now}
			e.flows[key] = f
			e.markHostLocked(f)
		}
		e.mu.Unlock()
		e.st.passed.Add(1)
		e.pass(ob, p.Bytes(), m)
	default:
		e.mu.Unlock()
		e.st.unknown.Add(1)
		e.refuse(ob, p, m)
	}
}

func (e *Engine) udp(ob *outbox, p packet.Packet, m Meta, src, dst netip.AddrPort, now int64) {
	e.datagram(ob, p, m, flowKey{proto: packet.ProtoUDP, src: src, dst: dst}, now)
}

// datagram handles a UDP datagram or an ICMP echo request of the flow key: the first one
// starts the flow, the later ones follow its decision.
func (e *Engine) datagram(ob *outbox, p packet.Packet, m Meta, key flowKey, now int64) {
	e.mu.Lock()
	f := e.flows[key]
	if f == nil {
		o := e.newFlowLocked(key, p, m, now)
		e.mu.Unlock()
		e.apply(ob, o, p, m)
		return
	}
	f.last = now
	st, owner := f.state, f.owner
	if st == statePending {
		f.hold(p, m)
	}
	var o outcome
	if st == stateRelay {
		f.inMeta = inbound(m)
		o = outcome{act: actRelay, owner: f.owner, ownerKnown: f.ownerKnown}
	}
	e.mu.Unlock()
	switch st {
	case stateRelay:
		e.relay(o, p)
	case statePass:
		e.pass(ob, p.Bytes(), m)
	case stateDNS:
		e.answer(p, m, owner)
	case stateDrop:
		e.st.dropped.Add(1)
	}
}

// newFlowLocked starts a flow for its first packet p; it is called with e.mu held. A flow
// that must wait for its owner keeps p (held); otherwise it is decided now. It returns what
// the caller does with p once it has released e.mu (actNone: nothing).
func (e *Engine) newFlowLocked(key flowKey, p packet.Packet, m Meta, now int64) outcome {
	if len(e.flows) >= e.opts.MaxFlows {
		e.sweepLocked(now)
		if len(e.flows) >= e.opts.MaxFlows && !e.evictHostUDPLocked() {
			e.st.tableFull.Add(1)
			e.log.Debug("flow table full; new flow refused", "src", key.src, "dst", key.dst)
			e.book.Add(refusal.Limit, refusal.Event{Src: key.src, Dst: key.dst})
			return outcome{act: actRefuse}
		}
	}
	if e.pendingN >= e.opts.MaxPending {
		// Too many flows wait for their owner: this one is dropped without an answer, so
		// a TCP client retransmits its SYN and a UDP one its datagram.
		e.st.tableFull.Add(1)
		e.log.Debug("too many flows wait for their owner; new flow dropped", "src", key.src, "dst", key.dst)
		e.book.Add(refusal.Limit, refusal.Event{Src: key.src, Dst: key.dst})
		return outcome{act: actDrop}
	}
	f := &flow{key: key, state: statePending, created: now, last: now}
	e.markPendingLocked(f)
	ek := key.evKey()
	if ev, ok := e.events[ek]; ok {
		delete(e.events, ek)
		f.pid, f.pidKnown, f.pidAt = ev.pid, true, ev.seen
	}
	pol := e.pol.Load()
	switch {
	case isICMP(key.proto) && pol.LocalCapture():
		// With local = true every echo request is refused: no owner is needed.
		e.flows[key] = f
		return e.decideLocked(pol, f, now)
	case !f.pidKnown && e.opts.Events != nil && !pol.FromVMNetwork(key.src.Addr()):
		// Wait for the connect event (SYN before CONNECT).
		e.flows[key] = f
		e.pendByEv[ek] = f
		f.hold(p, m)
		f.stop = e.clock.AfterFunc(e.opts.EventWait, func() { e.eventTimeout(f) })
		return outcome{}
	case e.needInfo(pol, f):
		e.flows[key] = f
		f.hold(p, m)
		e.resolveLocked(f)
		return outcome{}
	default:
		e.flows[key] = f
		o := e.decideLocked(pol, f, now)
		if o.act == actRelay {
			f.inMeta = inbound(m)
		}
		return o
	}
}
