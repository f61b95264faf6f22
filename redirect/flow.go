package redirect

import (
	"math/rand/v2"
	"net/netip"

	"github.com/agentcage/router/packet"
	"github.com/agentcage/router/proc"
	"github.com/agentcage/router/rules"
)

// flowKey is a flow's original 5-tuple as its first packet had it: src is this host's end
// (the app, or a VM behind a TUN), dst the remote end.
type flowKey struct {
	proto    uint8
	src, dst netip.AddrPort
}

// evKey matches a connect event to a packet: the event's local address may be unspecified
// while the socket is not yet bound to one, so it is left out.
type evKey struct {
	proto  uint8
	lport  uint16
	remote netip.AddrPort
}

func (k flowKey) evKey() evKey { return evKey{proto: k.proto, lport: k.src.Port(), remote: k.dst} }

type evEntry struct {
	pid uint32
	at  int64
}

// flowState is what the packets of a flow get.
//
//	pending ──decide──► pass | reflect | dns | drop      (refuse: the entry is removed)
//	   │                  │
//	   └──expire──►(gone)◄┘ (Idle, UDPIdle, or Linger after RST / FIN both ways)
type flowState uint8

const (
	statePending flowState = iota // held until the owner is known
	statePass                     // sent on unchanged
	stateReflect                  // rewritten to and from the listener
	stateDNS                      // UDP: every datagram answered in process
	stateDrop                     // UDP: every datagram dropped
)

// maxHeld bounds the packets held per pending flow (SYN retransmissions, a burst of UDP).
const maxHeld = 4

// flow is one table entry. All fields are guarded by Engine.mu.
type flow struct {
	key   flowKey
	state flowState

	// stateReflect: peer is the source the listener sees (D:pr), to the listener's
	// address the reflected packets go to (X:L).
	peer, to netip.AddrPort

	pid        uint32 // from a connect event or the lookup
	pidKnown   bool
	owner      proc.Info
	ownerKnown bool
	verdict    rules.Verdict

	created, last int64 // engine time (ns)
	closing       bool  // a RST, or a FIN each way, was seen
	finApp        bool  // FIN from the app's side
	finLis        bool  // FIN from the listener (reflected) or the remote end
	rst           bool

	held      []held      // statePending
	stop      func() bool // statePending: the event-wait timer
	resolving bool        // statePending: a worker is looking up the owner
}

type held struct {
	b []byte
	m Meta
}

// action is what happens to the packets of a flow once decided.
type action uint8

const (
	actPass    action = iota + 1
	actReflect        // to flow.to, from flow.peer
	actRefuse         // TCP: drop, and a RST to the app
	actDrop
	actDNS
)

// track notes the flags of a TCP packet of f; fromApp is the app's direction.
func (f *flow) track(fl uint8, fromApp bool, now int64) {
	f.last = now
	if fl&packet.TCPRst != 0 {
		f.rst = true
	}
	if fl&packet.TCPFin != 0 {
		if fromApp {
			f.finApp = true
		} else {
			f.finLis = true
		}
	}
	// A passed flow is seen in the app's direction only: its own FIN closes it.
	f.closing = f.rst || f.finApp && (f.finLis || f.state == statePass)
}

// input handles one outbound packet; p may be rewritten in place and is not kept.
func (e *Engine) input(p packet.Packet, m Meta, now int64) {
	e.st.packets.Add(1)
	if !m.Outbound || m.Loopback || !p.HasPorts() {
		e.pass(p.Bytes(), m)
		return
	}
	src := netip.AddrPortFrom(p.Src(), p.SrcPort())
	dst := netip.AddrPortFrom(p.Dst(), p.DstPort())
	// A resolver on a link-local address is still a way out for names: DNS to it is
	// answered like any other.
	if hostLocal(dst.Addr()) && !(dst.Port() == 53 && dst.Addr().IsLinkLocalUnicast()) {
		e.pass(p.Bytes(), m)
		return
	}
	if p.IsTCP() {
		e.tcp(p, m, src, dst, now)
	} else {
		e.udp(p, m, src, dst, now)
	}
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
		e.newFlowLocked(key, p, m, now)
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
		e.newFlowLocked(key, p, m, now)
		return
	}
	f.last = now
	st := f.state
	if st == statePending {
		f.hold(p, m)
	}
	e.mu.Unlock()
	switch st {
	case statePass:
		e.pass(p.Bytes(), m)
	case stateDNS:
		e.answer(p, m)
	case stateDrop:
		e.st.dropped.Add(1)
	}
}

func (f *flow) hold(p packet.Packet, m Meta) {
	if len(f.held) >= maxHeld {
		return
	}
	f.held = append(f.held, held{b: append([]byte(nil), p.Bytes()...), m: m})
}

// newFlowLocked starts a flow for its first packet p. It is called with e.mu held and
// unlocks it.
func (e *Engine) newFlowLocked(key flowKey, p packet.Packet, m Meta, now int64) {
	if len(e.flows) >= e.opts.MaxFlows {
		e.sweepLocked(now)
		if len(e.flows) >= e.opts.MaxFlows {
			e.mu.Unlock()
			e.st.tableFull.Add(1)
			e.log.Debug("flow table full; new flow refused", "src", key.src, "dst", key.dst)
			e.refuse(p, m)
			return
		}
	}
	f := &flow{key: key, state: statePending, created: now, last: now}
	ek := key.evKey()
	if ev, ok := e.events[ek]; ok {
		delete(e.events, ek)
		f.pid, f.pidKnown = ev.pid, true
	}
	pol := e.pol.Load()
	switch {
	case !f.pidKnown && e.opts.Events != nil && !pol.fromVM(key.src.Addr()):
		// Wait for the connect event (SYN before CONNECT).
		e.flows[key] = f
		e.pendByEv[ek] = f
		f.hold(p, m)
		f.stop = e.clock.AfterFunc(e.opts.EventWait, func() { e.eventTimeout(f) })
		e.mu.Unlock()
	case e.needInfo(pol, f):
		e.flows[key] = f
		f.hold(p, m)
		e.resolveLocked(f)
		e.mu.Unlock()
	default:
		e.flows[key] = f
		act := e.decideLocked(pol, f, now)
		peer, to := f.peer, f.to
		e.mu.Unlock()
		e.apply(act, peer, to, p, m)
	}
}

// needInfo reports whether the rules need more than f's PID to decide.
func (e *Engine) needInfo(pol *policy, f *flow) bool {
	if f.ownerKnown || (f.pidKnown && e.own[f.pid]) || !pol.needProc || pol.fromVM(f.key.src.Addr()) ||
		f.key.dst.Port() == 53 { // DNS is answered whoever asks; only the PID (own or not) matters
		return false
	}
	if f.pidKnown {
		return e.opts.Resolver != nil
	}
	return e.opts.Lookup != nil
}

// resolveLocked starts a worker that finds f's owner (by PID, or by Lookup), then decides.
func (e *Engine) resolveLocked(f *flow) {
	if e.stopped {
		return
	}
	f.resolving = true
	key, pid, byPID := f.key, f.pid, f.pidKnown
	e.workers.Go(func() {
		var info proc.Info
		var err error
		switch {
		case !byPID:
			info, err = e.opts.Lookup(key.proto, key.src, key.dst)
		case e.opts.Resolver != nil:
			info, err = e.opts.Resolver.ByPID(pid)
		default:
			info = proc.Info{PID: int(pid)}
		}
		if err != nil {
			e.st.lookupErrors.Add(1)
			e.log.Debug("owner lookup", "src", key.src, "dst", key.dst, "pid", pid, "err", err)
		}
		e.resolved(f, info, err == nil)
	})
}

// resolved records the outcome of an owner lookup for f and decides it.
func (e *Engine) resolved(f *flow, info proc.Info, ok bool) {
	e.mu.Lock()
	if e.stopped || e.flows[f.key] != f || f.state != statePending {
		e.mu.Unlock()
		return
	}
	f.resolving = false
	if ok {
		f.owner, f.ownerKnown = info, true
		if !f.pidKnown && info.PID > 0 {
			f.pid, f.pidKnown = uint32(info.PID), true
		}
	}
	e.finishLocked(f, e.now())
}

// finishLocked decides the pending flow f and applies the decision to its held packets.
// It is called with e.mu held and unlocks it.
func (e *Engine) finishLocked(f *flow, now int64) {
	hs := f.held // before deciding: a refused flow leaves the table, with what it holds
	f.held = nil
	act := e.decideLocked(e.pol.Load(), f, now)
	peer, to := f.peer, f.to
	e.mu.Unlock()
	for _, h := range hs {
		p, err := packet.Parse(h.b)
		if err != nil {
			continue
		}
		e.apply(act, peer, to, p, h.m)
	}
}

// eventTimeout runs when f's connect event did not come within EventWait.
func (e *Engine) eventTimeout(f *flow) {
	e.mu.Lock()
	if e.stopped || e.flows[f.key] != f || f.state != statePending || f.pidKnown || f.resolving {
		e.mu.Unlock()
		return
	}
	e.workers.Add(1) // this goroutine may start others; Run must wait for it
	defer e.workers.Done()
	e.st.eventTimeouts.Add(1)
	ek := f.key.evKey()
	if e.pendByEv[ek] == f {
		delete(e.pendByEv, ek)
	}
	f.stop = nil
	if e.opts.Lookup != nil && !e.pol.Load().fromVM(f.key.src.Addr()) {
		// The fallback gives the PID too, which tells the router's own flows.
		e.resolveLocked(f)
		e.mu.Unlock()
		return
	}
	e.finishLocked(f, e.now())
}

// Event takes a socket event: a CONNECT names the process of a flow that is waiting for it,
// or is kept (EventTTL) for the flow's first packet; a CLOSE forgets it. Run feeds the
// events of Options.Events through it; it is safe for concurrent use.
func (e *Engine) Event(ev SocketEvent) {
	e.st.events.Add(1)
	ek := evKey{proto: ev.Proto, lport: ev.Local.Port(), remote: unmapAP(ev.Remote)}
	now := e.now()
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	e.workers.Add(1) // a decision below may start workers; Run must wait for them
	defer e.workers.Done()
	if ev.Kind != EventConnect {
		delete(e.events, ek)
		e.mu.Unlock()
		return
	}
	f := e.pendByEv[ek]
	if f == nil {
		if len(e.events) >= e.opts.MaxFlows {
			e.sweepLocked(now)
		}
		if len(e.events) < e.opts.MaxFlows {
			e.events[ek] = evEntry{pid: ev.PID, at: now}
		}
		e.mu.Unlock()
		return
	}
	// SYN first, CONNECT second.
	delete(e.pendByEv, ek)
	if f.stop != nil {
		f.stop()
		f.stop = nil
	}
	f.pid, f.pidKnown = ev.PID, true
	if e.needInfo(e.pol.Load(), f) {
		e.resolveLocked(f)
		e.mu.Unlock()
		return
	}
	e.finishLocked(f, now)
}

// decideLocked decides flow f (pending) from what is known of it and sets its state:
// refused flows leave the table, reflected ones get their peer. It returns the action for
// f's packets.
func (e *Engine) decideLocked(pol *policy, f *flow, now int64) action {
	k := f.key
	tcp := k.proto == packet.ProtoTCP
	if f.pidKnown && !f.ownerKnown {
		f.owner.PID = int(f.pid) // for logs; Owner still looks the process up
	}
	act := e.verdictLocked(pol, f)
	if act == actReflect {
		lport := e.opts.ListenerPort
		if tcp && k.dst.Port() == 53 {
			lport = e.opts.DNSPort
		}
		if !e.mapLocked(f, lport, now) {
			e.log.Warn("no free peer port to reflect a flow; refused", "src", k.src, "dst", k.dst)
			act = actRefuse
		}
	}
	switch act {
	case actPass:
		f.state = statePass
		e.st.passed.Add(1)
	case actReflect:
		f.state = stateReflect
		e.st.reflected.Add(1)
	case actDNS:
		f.state = stateDNS
	case actDrop:
		f.state = stateDrop
		e.st.droppedFlows.Add(1)
	case actRefuse:
		e.removeLocked(f, now)
		e.st.refused.Add(1)
	}
	f.last = now
	return act
}

// verdictLocked turns what is known of f into an action (see the package documentation).
func (e *Engine) verdictLocked(pol *policy, f *flow) action {
	k := f.key
	tcp := k.proto == packet.ProtoTCP
	if f.pidKnown && e.own[f.pid] {
		return actPass
	}
	switch {
	case !tcp && k.dst.Port() == 53:
		if e.opts.DNS == nil {
			return actDrop
		}
		return actDNS
	case tcp && k.dst.Port() == 53:
		if e.opts.DNSPort == 0 {
			return actRefuse
		}
		return actReflect
	case e.opts.Names != nil && e.opts.Names.InPool(k.dst.Addr()):
		if tcp {
			return actReflect
		}
		return actDrop
	}
	q := rules.Query{Src: k.src.Addr(), Dst: k.dst.Addr(), Port: k.dst.Port(), Network: rules.UDP}
	if tcp {
		q.Network = rules.TCP
	}
	if f.ownerKnown {
		q.App, q.AppPath, q.Services = f.owner.Name, f.owner.Path, f.owner.Services
	}
	if e.opts.Names != nil {
		if n, ok := e.opts.Names.NameFor(k.dst.Addr()); ok {
			q.Host = n
		}
	}
	v := pol.Rules.Decide(&q)
	f.verdict = v
	final := pol.final(v, q.Host != "")
	direct := v.Action == rules.Direct && final
	if !tcp {
		if direct {
			return actPass
		}
		return actDrop
	}
	if k.dst.Port() == 853 {
		// DNS over TLS would carry names past the DNS the engine answers.
		if direct {
			return actPass
		}
		return actRefuse
	}
	switch {
	case v.Action == rules.Block && final:
		return actRefuse
	case direct && !e.opts.ReflectDirect:
		return actPass
	}
	return actReflect
}

// mapLocked gives the reflected flow f its peer (D:pr) and listener address (X:lport):
// pr is the app's own port unless another live or recent flow already uses D:pr.
func (e *Engine) mapLocked(f *flow, lport uint16, now int64) bool {
	k := f.key
	x := k.src.Addr()
	switch {
	case x.Is4() && e.refl4.IsValid():
		x = e.refl4
	case x.Is6() && e.refl6.IsValid():
		x = e.refl6
	}
	peer := k.dst
	free := func(pr uint16) bool {
		peer = netip.AddrPortFrom(k.dst.Addr(), pr)
		if e.byPeer[peer] != nil {
			return false
		}
		if t, ok := e.recent[peer]; ok && t > now {
			return false
		}
		return true
	}
	ok := free(k.src.Port())
	for i := 0; !ok && i < 64; i++ {
		ok = free(uint16(1024 + rand.N(65536-1024)))
	}
	if !ok {
		return false
	}
	f.peer, f.to = peer, netip.AddrPortFrom(x, lport)
	e.byPeer[peer] = f
	return true
}

// removeLocked takes f out of the table.
func (e *Engine) removeLocked(f *flow, now int64) {
	if e.flows[f.key] == f {
		delete(e.flows, f.key)
	}
	if f.state == stateReflect && e.byPeer[f.peer] == f {
		delete(e.byPeer, f.peer)
		if len(e.recent) < e.opts.MaxFlows {
			e.recent[f.peer] = now + int64(e.opts.TimeWait)
		}
	}
	if f.state == statePending {
		ek := f.key.evKey()
		if e.pendByEv[ek] == f {
			delete(e.pendByEv, ek)
		}
		if f.stop != nil {
			f.stop()
			f.stop = nil
		}
		f.held = nil
	}
}

// pendingMax bounds how long a flow may stay pending (a lookup that hangs).
const pendingMax = int64(30e9)

// sweepLocked removes expired entries.
func (e *Engine) sweepLocked(now int64) {
	idle, udpIdle, linger := int64(e.opts.Idle), int64(e.opts.UDPIdle), int64(e.opts.Linger)
	for _, f := range e.flows {
		age := now - f.last
		var expired bool
		switch {
		case f.state == statePending:
			expired = now-f.created > pendingMax+int64(e.opts.EventWait)
		case f.key.proto == packet.ProtoUDP:
			expired = age > udpIdle
		case f.closing:
			expired = age > linger
		default:
			expired = age > idle
		}
		if expired {
			e.removeLocked(f, now)
		}
	}
	ttl := int64(e.opts.EventTTL)
	for k, ev := range e.events {
		if now-ev.at > ttl {
			delete(e.events, k)
		}
	}
	for p, t := range e.recent {
		if t <= now {
			delete(e.recent, p)
		}
	}
}

// apply does act to p, a packet of a flow reflected between peer and to (for actReflect).
func (e *Engine) apply(act action, peer, to netip.AddrPort, p packet.Packet, m Meta) {
	switch act {
	case actPass:
		e.pass(p.Bytes(), m)
	case actReflect:
		rewrite(p, peer, to, m.ChecksumsValid)
		e.write(p.Bytes(), inbound(m))
	case actRefuse:
		e.refuse(p, m)
	case actDrop:
		e.st.dropped.Add(1)
	case actDNS:
		e.answer(p, m)
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

// answer answers a DNS query p (UDP) on a worker goroutine, or drops it when DNSWorkers
// answers are already running.
func (e *Engine) answer(p packet.Packet, m Meta) {
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
		ans := dns.HandleWire(e.ctx, q, true)
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
