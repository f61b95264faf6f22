package redirect

import "github.com/agentcage/router/windivert/packet"

// The table's budgets (see Options.MaxFlows): the host's own passed flows and the flows
// waiting for their owner each have a share, so that a host app opening flows by the
// thousand (a P2P client, a game) cannot take the room of the VM's. Every function here is
// called with e.mu held.

// markPendingLocked counts f, just entered, as waiting for its owner.
func (e *Engine) markPendingLocked(f *flow) {
	f.pending = true
	e.pendingN++
}

// unmarkPendingLocked ends f's wait.
func (e *Engine) unmarkPendingLocked(f *flow) {
	if f.pending {
		f.pending = false
		e.pendingN--
	}
}

// admitHostLocked makes room in the host's share for one more entry: true when
// there is room, after evicting the host's oldest passed UDP entry if needed.
func (e *Engine) admitHostLocked() bool {
	if e.hostN < e.opts.MaxHostFlows {
		return true
	}
	return e.evictHostUDPLocked()
}

// evictHostUDPLocked drops the host's oldest passed UDP entry; false when there is none.
func (e *Engine) evictHostUDPLocked() bool {
	front := e.hostUDP.Front()
	if front == nil {
		return false
	}
	e.removeLocked(front.Value.(*flow), e.now())
	e.st.evicted.Add(1)
	return true
}

// markHostLocked counts f (decided: passed, not caged) in the host's share.
func (e *Engine) markHostLocked(f *flow) {
	f.host = true
	e.hostN++
	if f.key.proto != packet.ProtoTCP {
		f.hostElem = e.hostUDP.PushBack(f)
	}
}

// unmarkHostLocked takes f out of the host's share.
func (e *Engine) unmarkHostLocked(f *flow) {
	if !f.host {
		return
	}
	f.host = false
	e.hostN--
	if f.hostElem != nil {
		e.hostUDP.Remove(f.hostElem)
		f.hostElem = nil
	}
}
