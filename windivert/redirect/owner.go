package redirect

import (
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/windivert/packet"

	"github.com/agentcage/router/rules"
)

// needInfo reports whether the rules need more than f's PID to decide.
func (e *Engine) needInfo(pol *policy.Policy, f *flow) bool {
	if isICMP(f.key.proto) {
		// Only a process known not to be caged may ping (local = false); the IP Helper
		// tables have no ICMP sockets, so only the PID's description can tell.
		return !pol.LocalCapture() && !f.ownerKnown && f.pidKnown && !e.own[f.pid] && e.opts.Resolver != nil
	}
	if f.ownerKnown || (f.pidKnown && e.own[f.pid]) || !pol.NeedsOwner(&policy.Flow{Src: f.key.src.Addr()}) ||
		f.key.dst.Port() == 53 && pol.DNSAll() { // every process's DNS is answered: only the PID (own or not) matters
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
	key, pid, byPID, at := f.key, f.pid, f.pidKnown, f.pidAt
	e.workers.Go(func() {
		var info rules.Owner
		var err error
		atr, timed := e.opts.Resolver.(PIDAtResolver)
		switch {
		case !byPID:
			info, err = e.opts.Lookup(key.proto, key.src, key.dst)
		case timed && !at.IsZero():
			info, err = atr.ByPIDAt(pid, at) // a PID reused since the event is no owner
		case e.opts.Resolver != nil:
			info, err = e.opts.Resolver.ByPID(pid)
		default:
			info = rules.Owner{PID: int(pid)}
		}
		if err != nil {
			e.st.lookupErrors.Add(1)
			e.log.Debug("owner lookup", "src", key.src, "dst", key.dst, "pid", pid, "err", err)
		}
		e.resolved(f, info, err == nil)
	})
}

// resolved records the outcome of an owner lookup for f and decides it.
func (e *Engine) resolved(f *flow, info rules.Owner, ok bool) {
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
	e.finish(f, e.now())
}

// finish decides the pending flow f and applies the decision to its held packets. It is
// called with e.mu held and releases it: the packets are sent without the lock.
func (e *Engine) finish(f *flow, now int64) {
	hs := f.held // before deciding: a refused flow leaves the table, with what it holds
	f.held = nil
	o := e.decideLocked(e.pol.Load(), f, now)
	if o.act == actRelay && len(hs) > 0 {
		f.inMeta = inbound(hs[len(hs)-1].m)
	}
	e.mu.Unlock()
	for _, h := range hs {
		p, err := packet.Parse(h.b)
		if err != nil {
			continue
		}
		e.apply(nil, o, p, h.m)
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
	if e.opts.Lookup != nil && !e.pol.Load().FromVMNetwork(f.key.src.Addr()) && !isICMP(f.key.proto) {
		// The fallback gives the PID too, which tells the router's own flows.
		e.resolveLocked(f)
		e.mu.Unlock()
		return
	}
	e.finish(f, e.now())
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
			e.events[ek] = evEntry{pid: ev.PID, at: now, seen: ev.At}
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
	f.pid, f.pidKnown, f.pidAt = ev.PID, true, ev.At
	if e.needInfo(e.pol.Load(), f) {
		e.resolveLocked(f)
		e.mu.Unlock()
		return
	}
	e.finish(f, now)
}
