package redirect

import (
	"github.com/agentcage/router/windivert/packet"
)

// removeLocked takes f out of the table.
func (e *Engine) removeLocked(f *flow, now int64) {
	if e.flows[f.key] == f {
		delete(e.flows, f.key)
	}
	e.unmarkPendingLocked(f)
	e.unmarkHostLocked(f)
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
		case f.key.proto != packet.ProtoTCP: // UDP, ICMP
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
