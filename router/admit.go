package router

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/rules/policy"
)

// admission is what the router lets flows hold, so that one source (a guest, an app) cannot
// starve the others nor the router itself:
//
//   - setups: the flows being set up at once (deciding, resolving, connecting, the SOCKS
//     handshake, which waits for the proxy's own connect), maxSetups in all, shared fairly
//     between sources (see shares; a quarter is kept for a source not yet seen): a guest
//     holding hundreds of connections to a silent destination takes its share, and the
//     next source's flow is set up at once. A flow
//     beyond its source's share waits, up to the connect timeout, in order. Waiting flows
//     are bounded by the flow budget they already hold (below), not by a count of their
//     own: a client that opens flows faster than the proxy answers (it writes its request
//     and goes on without waiting for a reply) is queued, not reset.
//   - dst: at most perDestination flows being set up at once to a destination (name or
//     address) that has not answered lately (no set-up to it ended within quickSetup of
//     its start in the last quickSetup). A silent destination costs one connect timeout
//     per flow, so this bounds the set-up slots one can hold; a destination that answers is
//     not capped (its flows have their source's share), so a burst to one busy host (a
//     package manager's parallel downloads) goes at the pace the host answers. A flow beyond
//     the cap waits for its destination's turn (in order, up to the connect timeout,
//     holding no set-up slot), never reset; the first quick answer lets every waiting flow
//     go. The waiting are bounded by the flow budget, as above.
//   - flows and total: the transparent flows alive (being set up or relayed), each holding
//     up to two descriptors. total is checked at accept, before any work; flows shares the
//     same budget fairly between sources once the source is known. Beyond either the flow is
//     refused at once: descriptors are never exhausted by relayed flows. A lone source may
//     take all but a 64th of the budget (9,000 idle flows under a limit of 20,000); with
//     others, its fair share.
//   - forwards: the forwards' flows, a budget of their own, shared fairly between each
//     forward's guests (forwardAdmission).
//   - inbounds: the inbounds' connections (all inbounds together), a budget of their own
//     (a 32nd of the descriptors, two per connection, at most inboundTotal), shared
//     fairly between guests (inboundAdmission).
//
// Every listener has its own share of the descriptor limit (budgetFor), so that no
// listener's flood takes another's capacity: the transparent flows, the forwards and the
// inbounds above, and in the fixed reserve the metrics endpoint (metrics.MaxConns), the
// control channel (control.MaxConns), the DNS server's TCP connections and sockets (its own
// limits), the relay's pipes, the listeners themselves and the process's other
// descriptors (netlink, logs).
type admission struct {
	setups   *shares
	flows    *shares
	forwards *forwardAdmission
	inbounds *inboundAdmission
	total    atomic.Int64
	maxTotal int64
	perDst   int

	mu  sync.Mutex           // guards dst
	dst map[dstKey]*dstSlots // flows being set up and waiting, by destination
}

// dstSlots is one destination's set-up slots: held, and the flows waiting in order (each
// channel is closed when the slot is handed to it).
type dstSlots struct {
	held     int
	waiting  []chan struct{}
	answered time.Time // when a set-up to it last ended within quickSetup of its start
}

// quickSetup is how soon a set-up must end for its destination to count as answering, and
// how long that lasts.
const quickSetup = time.Second

// takeLocked takes one of key's set-up slots when one is free now and nobody waits for
// key: below perDst, or any number while key answers (see quickSetup). It returns key's
// slots (made when key had none) and whether one was taken; a.mu is held.
func (a *admission) takeLocked(key dstKey) (*dstSlots, bool) {
	d := a.dst[key]
	if d == nil {
		d = &dstSlots{}
		a.dst[key] = d
	}
	if len(d.waiting) != 0 || d.held >= a.perDst && time.Since(d.answered) > quickSetup {
		return d, false
	}
	d.held++
	return d, true
}

// dstKey is a destination for the per-destination cap: its name when known, else its
// address (any port).
type dstKey struct {
	host string
	addr netip.Addr
}

// dstOf is pf's destination for the per-destination cap.
func dstOf(pf *policy.Flow) dstKey {
	if pf.Host != "" {
		return dstKey{host: pf.Host}
	}
	return dstKey{addr: pf.Dst}
}

// Budget figures. maxSetups (router.go) is the set-up slots in all.
const (
	// minSetupShare is the least share of set-up slots a source gets however many sources
	// there are.
	minSetupShare = 16
	// perDestination is the flows set up to one destination at once.
	perDestination = 32
	// reserveDescriptors are kept out of the flow budgets: the relay's pipe pool (64 pipes,
	// 128 descriptors), the DNS server's TCP connections and sockets (256), the metrics
	// endpoint (16) and the control channel (32) with a little room (16 more), the
	// listeners, netlink, logs (64), and the forwards' budget (256).
	reserveDescriptors = 128 + 256 + 64 + 64 + 256
	// defaultDescriptors is the budget's base when the limit is unknown (Windows).
	defaultDescriptors = 65536
)

// descriptorBudget is a descriptor limit cut into the listeners' shares, in flows or
// connections (each holds two descriptors: its client's and its destination's).
type descriptorBudget struct {
	flows    int // transparent flows
	forwards int // forward flows
	inbounds int // inbound connections, all inbounds together
}

// budgetFor splits a descriptor limit: the reserve (at most half of a small limit), a 32nd
// for the inbounds (at least 128 descriptors, at most an eighth of the limit and
// inboundTotal connections), and the rest for the transparent flows; the forwards' budget
// is cut from the reserve.
func budgetFor(descriptors int) descriptorBudget {
	if descriptors <= 0 {
		descriptors = defaultDescriptors
	}
	reserve := min(reserveDescriptors, descriptors/2)
	inbound := min(max(descriptors/32, 128), descriptors/8, 2*inboundTotal)
	return descriptorBudget{
		flows:    max((descriptors-reserve-inbound)/2, 16),
		forwards: max(reserve/8, 8),
		inbounds: max(inbound/2, 16),
	}
}

func newAdmission(descriptors int) *admission {
	b := budgetFor(descriptors)
	flows, forwards := b.flows, b.forwards
	return &admission{
		inbounds: newInboundAdmission(inboundPerSource, b.inbounds),
		setups:   newShares(maxSetups, maxSetups/4, minSetupShare, flows),
		flows:    newShares(flows, max(flows/64, 16), 16, 0),
		forwards: newForwardAdmission(forwards),
		maxTotal: int64(flows),
		perDst:   perDestination,
		dst:      map[dstKey]*dstSlots{},
	}
}

// enter counts an accepted transparent flow against the budget; false: over it (the
// flow must be refused and leave is not called).
func (a *admission) enter() bool {
	if a.total.Add(1) > a.maxTotal {
		a.total.Add(-1)
		return false
	}
	return true
}

// leave uncounts a flow enter counted.
func (a *admission) leave() { a.total.Add(-1) }

// dstTryAcquire takes one of key's set-up slots if dstAcquire would take one without
// waiting (one is free and nobody waits for key); false: nothing is taken.
func (a *admission) dstTryAcquire(key dstKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, ok := a.takeLocked(key)
	if !ok {
		a.dropLocked(key, d)
	}
	return ok
}

// dstAcquire takes one of key's set-up slots, waiting in order while key has perDst
// flows being set up, until ctx ends (errDstBusy wrapping its error), or errDstBusy at
// once when as many flows as the flow budget already wait for key.
func (a *admission) dstAcquire(ctx context.Context, key dstKey) error {
	a.mu.Lock()
	d, ok := a.takeLocked(key)
	if ok {
		a.mu.Unlock()
		return nil
	}
	if int64(len(d.waiting)) >= a.maxTotal {
		a.mu.Unlock()
		return errDstBusy
	}
	ready := make(chan struct{})
	d.waiting = append(d.waiting, ready)
	a.mu.Unlock()

	select {
	case <-ready:
		return nil
	case <-ctx.Done():
	}
	a.mu.Lock()
	select {
	case <-ready: // handed over meanwhile: give it back
		a.mu.Unlock()
		a.dstRelease(key, time.Time{})
	default:
		if i := slices.Index(d.waiting, ready); i >= 0 {
			d.waiting = slices.Delete(d.waiting, i, i+1)
		}
		a.dropLocked(key, d)
		a.mu.Unlock()
	}
	return fmt.Errorf("%w: %w", errDstBusy, ctx.Err())
}

// dstRelease gives back a slot dstAcquire or dstTryAcquire took at since (zero: no set-up
// was tried with it): to the first flow waiting for key, if any, and to every one when
// this set-up ended within quickSetup (the destination answers: it is not capped).
func (a *admission) dstRelease(key dstKey, since time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d := a.dst[key]
	if d == nil {
		return
	}
	if !since.IsZero() {
		if now := time.Now(); now.Sub(since) <= quickSetup {
			d.answered = now
			for _, w := range d.waiting {
				close(w)
			}
			d.held += len(d.waiting)
			d.waiting = d.waiting[:0]
		}
	}
	if len(d.waiting) > 0 {
		close(d.waiting[0])
		d.waiting = slices.Delete(d.waiting, 0, 1)
		return
	}
	d.held--
	a.dropLocked(key, d)
}

// dropLocked forgets key when nothing holds or waits for it; a.mu is held.
func (a *admission) dropLocked(key dstKey, d *dstSlots) {
	if d.held <= 0 && len(d.waiting) == 0 {
		delete(a.dst, key)
	}
}

// endSetup gives back what setup or trySetup took at since.
func (a *admission) endSetup(key string, dst dstKey, since time.Time) {
	a.setups.release(key)
	a.dstRelease(dst, since)
}

// Budgets is what the flows hold of the router's budgets now.
type Budgets struct {
	Flows, FlowBudget       int // transparent flows alive (being set up or relayed), and their budget
	Setups, SetupWaiting    int // set-up slots in use, and flows waiting for one
	Forwards, ForwardBudget int // forward flows alive, and their budget
	Inbounds, InboundBudget int // inbound connections open (every inbound), and their budget
}

// Budgets reports the budgets' use (see admission).
func (r *Router) Budgets() Budgets {
	setups, _, waiting := r.adm.setups.stats()
	fwd, _, _ := r.adm.forwards.s.stats()
	in, _, _ := r.adm.inbounds.guests.stats()
	return Budgets{
		Flows: int(r.adm.total.Load()), FlowBudget: int(r.adm.maxTotal),
		Setups: setups, SetupWaiting: waiting,
		Forwards: fwd, ForwardBudget: r.adm.forwards.s.capacity,
		Inbounds: in, InboundBudget: r.adm.inbounds.guests.capacity,
	}
}
