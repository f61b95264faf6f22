package redirect

import (
	"net/netip"

	"github.com/agentcage/router/packet"
	"github.com/agentcage/router/policy"
	"github.com/agentcage/router/rules"
)

// input handles one outbound packet; p may be rewritten in place and is not kept.
func (e *Engine) input(p packet.Packet, m Meta, now int64) {
	e.st.packets.Add(1)
	if !m.Outbound || m.Loopback || !p.HasPorts() {
		e.pass(p.Bytes(), m)
		return
	}
	src := netip.AddrPortFrom(p.Src(), p.SrcPort())
	dst := netip.AddrPortFrom(p.Dst(), p.DstPort())
	if policy.IsLocal(dst.Addr()) && e.localPass(p, src, dst) {
		e.pass(p.Bytes(), m)
		return
	}
	if p.IsTCP() {
		e.tcp(p, m, src, dst, now)
	} else {
		e.udp(p, m, src, dst, now)
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

func (e *Engine) tcp(p packet.Packet, m Meta, src, dst netip.AddrPort, now int64) {
	fl := p.TCPFlags()
	e.mu.Lock()
	if e.isListenerPort(src.Port()) {
		if f := e.byPeer[dst]; f != nil && f.to == src {
			// The listener answering a reflected peer: back to the app, as from D:pd.
			f.track(fl, false, now)
			k := f.key
			e.mu.Unlock()
			rewrite(p, k.dst, k.src, m.ChecksumsValid)
			e.write(p.Bytes(), inbound(m))
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
				e.write(p.Bytes(), inbound(m))
			case statePass:
				f.track(fl, true, now)
				e.mu.Unlock()
				e.pass(p.Bytes(), m)
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
		e.apply(o, p, m)
	case fl&packet.TCPSyn != 0:
		// SYN-ACK: the host serves a connection; it is not the engine's to redirect.
		e.flows[key] = &flow{key: key, state: statePass, created: now, last: now}
		e.mu.Unlock()
		e.st.passed.Add(1)
		e.pass(p.Bytes(), m)
	default:
		e.mu.Unlock()
		e.st.unknown.Add(1)
		e.refuse(p, m)
	}
}

func (e *Engine) udp(p packet.Packet, m Meta, src, dst netip.AddrPort, now int64) {
	key := flowKey{proto: packet.ProtoUDP, src: src, dst: dst}
	e.mu.Lock()
	f := e.flows[key]
	if f == nil {
		o := e.newFlowLocked(key, p, m, now)
		e.mu.Unlock()
		e.apply(o, p, m)
		return
	}
	f.last = now
	st, app := f.state, f.owner.Name
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
		e.pass(p.Bytes(), m)
	case stateDNS:
		e.answer(p, m, app)
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
		if len(e.flows) >= e.opts.MaxFlows {
			e.st.tableFull.Add(1)
			e.log.Debug("flow table full; new flow refused", "src", key.src, "dst", key.dst)
			return outcome{act: actRefuse}
		}
	}
	f := &flow{key: key, state: statePending, created: now, last: now}
	ek := key.evKey()
	if ev, ok := e.events[ek]; ok {
		delete(e.events, ek)
		f.pid, f.pidKnown, f.pidAt = ev.pid, true, ev.seen
	}
	pol := e.pol.Load()
	switch {
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
