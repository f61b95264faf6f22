package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/accept"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/router/sniff"
	"github.com/agentcage/router/router/upload"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/socks5"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// The transparent flows' set-up on the epoll loops, the way redsocks does it on libevent:
// the loop that accepts a connection takes it through accept, addresses, classify, decide,
// set-up slots, connect (and the pipelined SOCKS5 handshake) to the relay on its own
// goroutine, one small state machine (setupFlow) per flow; the slow steps are handed to the
// goroutine path of tcp.go. docs/architecture.md ("a guest's TCP") walks the steps;
// this file is their code. A failure at any step resets the client (fail closed: never a
// direct fallback), and the upstream's health counts it as Connect would.
//
// Logs never block a loop: records go through the flow log's goroutine (logLater).

const (
	// listenSlot marks a listener in the epoll data; Pad is its index in loop.lents.
	listenSlot = -2
	// acceptBatch bounds the connections a loop accepts per readiness, so that a flood of
	// connections does not starve the flows it relays.
	acceptBatch = 32
	// handshakeRoom holds the longest greeting, credentials and request.
	handshakeRoom = 3 + 3 + 2*socks5.MaxCredentialLen + socks5.MaxReplyLen
	// answersRoom holds every answer a proxy sends before the destination's bytes.
	answersRoom = 2 + 2 + socks5.MaxReplyLen
)

// servedListener is a listener Serve gave the loops, while Serve runs.
type servedListener struct {
	r    *Router
	ctx  context.Context // Serve's: flows handed to a goroutine run under it
	rc   syscall.RawConn // the listener's; its descriptor is only used inside rc.Control
	port uint16          // the listener's
}

// loopListener is a listener on one loop. The loop's goroutine uses it; on, gone and resume are
// guarded by loop.mu.
type loopListener struct {
	ls      *servedListener
	l       *loop
	index   int32
	on      bool           // registered in the loop's epoll
	gone    bool           // Serve returned: never registered again
	backoff accept.Backoff // the pause after accept errors
	resume  time.Duration  // loop clock at which a paused listener is registered again
	err     error          // the last batch's accept error
	accept  func(fd uintptr)
	done    chan struct{} // closed by the loop once the listener is gone from it
}

// sstate is where a flow's set-up stands.
type sstate uint8

const (
	sConnecting  sstate = iota // waiting for the connect
	sSniffing                  // waiting for the client's first bytes, for their name (sniffWait)
	sNamePending               // connected to the proxy ahead of the name (speculate), nothing sent yet
	sSending                   // part of the handshake waits to be sent (pending)
	sAnswers                   // waiting for the proxy's answers
)

// setupFlow is a transparent flow the loop sets up: its record, its relay state (registered on
// the loop from the connect on, kept as it is for the relay), and the set-up's. It is the
// one allocation of a flow on this path. Only its loop's goroutine touches it, until the
// flow is handed to a goroutine or ends.
type setupFlow struct {
	relayFlow
	f        FlowRecord
	ls       *servedListener
	p        *compiled
	h        held      // names and share, given back when the flow ends
	dst      dstKey    // the destination's set-up slot
	slots    bool      // holds set-up slots
	slotsAt  time.Time // when they were taken (dstRelease: did the destination answer quickly)
	proxied  bool
	state    sstate
	target   netip.AddrPort // what the loop connects to: the destination or the proxy
	deadline time.Duration  // loop clock: the connect timeout
	hs       upstream.Handshake
	pending  []byte // handshake bytes not yet sent (a short write; rare)
	lowat    bool   // SO_RCVLOWAT is raised on fd[1] until the reply
	// pf is the flow as the policy sees it while its first bytes are awaited (sSniffing, or
	// awaiting).
	pf policy.Flow
	// awaiting: the connect to the proxy runs ahead of the name (speculate), which is due by
	// nameBy (loop clock); spec is the decision it was started for.
	awaiting bool
	nameBy   time.Duration
	spec     policy.Decision
}

// loopOK reports whether the loops may set flows up: the capture tells a descriptor's
// original destination, and the router opens its sockets itself (DialTCP left to the
// default) or is told how (ConnectFD).
func (r *Router) loopOK() bool {
	return !r.opts.GoroutineSetup && r.opts.OriginalFD != nil && (r.opts.ConnectFD != nil || !r.customDial)
}

// serveLoops accepts on ln with the loops until ctx is done or ln is closed; false when the
// loops cannot (the caller then accepts on a goroutine).
func (r *Router) serveLoops(ctx context.Context, ln *net.TCPListener) (bool, error) {
	if !r.loopOK() {
		return false, nil
	}
	rc, err := ln.SyscallConn()
	if err != nil {
		return false, nil
	}
	loops, err := r.loops.all()
	if err != nil {
		return false, nil
	}
	ls := &servedListener{r: r, ctx: ctx, rc: rc, port: netaddr.AddrPort(ln.Addr()).Port()}
	var ents []*loopListener
	loops = loops[:acceptors(len(loops))]
	for _, l := range loops {
		e, err := l.listen(ls)
		if err != nil {
			for _, e := range ents {
				e.l.unlisten(e)
			}
			if ctx.Err() != nil || isClosed(rc) {
				return true, nil
			}
			return false, nil
		}
		ents = append(ents, e)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	// Closing ln takes its descriptor out of every epoll; Serve notices it here.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !isClosed(rc) {
		select {
		case <-ctx.Done():
		case <-tick.C:
			continue
		}
		break
	}
	for _, e := range ents {
		e.l.unlisten(e)
	}
	return true, nil
}

// acceptors is how many of n loops accept: one per two, at least one. A loop that accepts a
// connection sets it up and relays it, so the loops that accept share the new flows; the
// others relay the flows the goroutine path hands them. Fewer loops accepting batch more
// events per wake-up: on the 2-core lab, one loop accepting took 10-20 % less CPU per
// connection than two, at the same rate (the kernel's work dominates a set-up, and every
// goroutine woken is a thread switch on a machine that runs the clients and the proxy too).
func acceptors(n int) int { return max(1, n/2) }

// isClosed reports whether the listener behind rc was closed.
func isClosed(rc syscall.RawConn) bool { return rc.Control(func(uintptr) {}) != nil }

// listen registers ls on l.
func (l *loop) listen(ls *servedListener) (*loopListener, error) {
	e := &loopListener{ls: ls, l: l, done: make(chan struct{})}
	e.accept = func(fd uintptr) { e.err = l.acceptBatch(e, int(fd)) }
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping {
		return nil, errClosed
	}
	e.index = int32(len(l.lents))
	for i, x := range l.lents {
		if x == nil {
			e.index = int32(i)
			break
		}
	}
	if int(e.index) == len(l.lents) {
		l.lents = append(l.lents, e)
	} else {
		l.lents[e.index] = e
	}
	if err := l.registerLocked(e); err != nil {
		l.lents[e.index] = nil
		return nil, err
	}
	return e, nil
}

// registerLocked adds e's listener to l's epoll: level-triggered, and exclusive, so that a
// connection wakes one loop, not all; l.mu is held.
func (l *loop) registerLocked(e *loopListener) error {
	var err error
	cerr := e.ls.rc.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: listenSlot, Pad: e.index}
		err = rawEpollCtl(l.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err = errors.Join(cerr, err); err != nil {
		return fmt.Errorf("event loop: listen: %w", err)
	}
	e.on = true
	return nil
}

// deregisterLocked takes e's listener out of l's epoll (a closed one is out already); l.mu
// is held.
func (l *loop) deregisterLocked(e *loopListener) {
	if !e.on {
		return
	}
	e.on = false
	e.ls.rc.Control(func(fd uintptr) { rawEpollCtl(l.epfd, unix.EPOLL_CTL_DEL, int(fd), &unix.EpollEvent{}) })
}

// unlisten takes e off l and waits until l ended the set-ups of its flows that were still
// running (as the goroutine path's end with Serve's context).
func (l *loop) unlisten(e *loopListener) {
	l.mu.Lock()
	e.gone = true
	l.deregisterLocked(e)
	if l.lents[e.index] == e {
		l.lents[e.index] = nil
	}
	l.gone = append(l.gone, e)
	l.wake()
	l.mu.Unlock()
	select {
	case <-e.done:
	case <-l.done:
	}
}

// goneListeners ends the set-ups of the flows of listeners Serve stopped; l.mu is not held.
func (l *loop) goneListeners(gone []*loopListener) {
	for _, e := range gone {
		for _, f := range l.snapshot() {
			if f != nil && !f.closed && f.setup != nil && f.setup.ls == e.ls {
				l.abort(f.setup, fmt.Errorf("connect: %w", context.Canceled))
			}
		}
		close(e.done)
	}
}

// snapshot copies l's flows (into a buffer reused between calls).
func (l *loop) snapshot() []*relayFlow {
	l.mu.Lock()
	l.snap = append(l.snap[:0], l.slots...)
	l.mu.Unlock()
	return l.snap
}

// acceptReady accepts on e's listener.
func (l *loop) acceptReady(e *loopListener, now time.Duration) {
	e.err = nil
	if err := e.ls.rc.Control(e.accept); err != nil {
		return // closed: Serve takes it off
	}
	if e.err == nil {
		e.backoff.Accepted()
		return
	}
	// Out of descriptors (or memory): stop polling the listener for a pause (package
	// accept), so that the loop neither spins on it nor stops for good.
	pause := e.backoff.Failed()
	l.mu.Lock()
	l.deregisterLocked(e)
	e.resume = now + pause
	l.mu.Unlock()
	time.AfterFunc(pause, func() {
		l.mu.Lock()
		l.resumeDue = true
		l.wake()
		l.mu.Unlock()
	})
	r, err := e.ls.r, e.err
	if r.refuse.note("accept failed", "event loop") {
		go r.log.Warn("accept failed; pausing", "err", err, "pause", pause)
	}
}

// resumeListeners registers the listeners whose pause is over (when the pause's timer woke
// the loop, or at the sweep).
func (l *loop) resumeListeners(now time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.lents {
		if e != nil && !e.on && !e.gone && e.resume != 0 && now >= e.resume {
			e.resume = 0
			if err := l.registerLocked(e); err != nil {
				e.resume = now + accept.MaxPause
			}
		}
	}
}

// acceptBatch accepts up to acceptBatch connections on lfd (inside rc.Control) and sets each
// up. It returns the error that should pause the listener, or nil.
func (l *loop) acceptBatch(e *loopListener, lfd int) error {
	for range acceptBatch {
		fd, peer, err := accept4(lfd, &l.sa)
		switch err {
		case nil:
			e.ls.r.loopAccepted(l, e.ls, fd, peer)
			continue
		case unix.EAGAIN:
			return nil
		case unix.EINTR, unix.ECONNABORTED, unix.EPERM, unix.EPROTO:
			continue // that connection only
		case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
			return fmt.Errorf("accept: %w", err)
		default:
			return fmt.Errorf("accept: %w", err)
		}
	}
	return nil
}

// loopAccepted sets up the connection fd from peer, accepted on ls: the steps of handle, on
// the loop (see the top of this file).
func (r *Router) loopAccepted(l *loop, ls *servedListener, fd int, peer netip.AddrPort) {
	if !r.adm.enter() {
		r.refuseFD(fd, peer, errOverBudget)
		return
	}
	r.flows.Add(1)
	p := r.pol.Load()
	s := &setupFlow{ls: ls, p: p}
	s.fd, s.slot = [2]int{fd, -1}, -1
	f := &s.f
	r.startFlow(f, peer)
	var pf policy.Flow
	src, dst, err := r.opts.OriginalFD(fd, peer)
	if err == nil {
		// A connection to the listener itself has its own address as original destination;
		// only one to the listener's port can be.
		var local netip.AddrPort
		if dst.Port() == ls.port {
			local, err = sockname(fd, &l.sa)
		}
		if err == nil {
			err = r.addresses(f, &pf, src, dst, local)
		}
	}
	if err != nil {
		f.Err = err
		r.refused(refusal.Capture, f)
		l.endEarly(s)
		return
	}
	p = r.forGuest(p, &pf) // a switched guest's profile (profile.go)
	s.p = p
	if r.opts.Owner != nil && p.Decision.NeedsOwner(&pf) {
		l.handOff(s, &pf, false)
		return
	}
	s.h.names = r.names(&pf)
	f.Host = pf.Host
	if f.Host != "" {
		f.NameFrom = "dns"
	}
	key := sourceKey(&pf, p)
	if !r.adm.flows.tryAcquire(key) {
		f.Err, f.Verdict = errOverShare, admissionVerdict
		r.refused(refusal.Limit, f)
		l.endEarly(s)
		return
	}
	s.h.key = key
	if p.Decision.NeedsSniff(&pf) {
		// The client's first bytes, looked at and left in the socket (they go on untouched
		// with the handshake or the relay). Not all in yet: the loop waits for them.
		res, first, ok := l.peekName(s, false)
		if !ok {
			s.pf = pf
			if !l.speculate(s) {
				l.awaitName(s)
			}
			return
		}
		r.sniffed(p, f, &pf, res, first)
		s.h.sniffed = true
	}
	l.decide(s, &pf)
}

// peekName looks at the client's first bytes of s for their name, leaving them in the
// socket; ok is false while they may still carry one (more to come, and not final: the
// wait is not over and the client did not end its side).
func (l *loop) peekName(s *setupFlow, final bool) (sniff.Result, []byte, bool) {
	n, err := recvPeek(s.fd[0], l.sniffBuf[:])
	if err != nil {
		n = 0
	}
	res := sniff.Sniff(l.sniffBuf[:n])
	if res.More && !final && n < len(l.sniffBuf) {
		return res, nil, false
	}
	if res.More {
		res = sniff.Result{}
	}
	return res, l.sniffBuf[:n], true
}

// speculate starts s's connect to its upstream while its first bytes are awaited, when the
// decision without their name already sends it through a SOCKS5 proxy the loop speaks to:
// the name mostly confirms it (a fake IP's flow whose bytes carry its own name), and the
// wait hides behind the connect. Nothing is sent to the proxy before the name is in and the
// decision stands (nameIn); a decision that changes closes the connection, which carried no
// request, and the flow is decided afresh. False: nothing was started (awaitName waits).
func (l *loop) speculate(s *setupFlow) bool {
	r, p, f, key := s.ls.r, s.p, &s.f, s.h.key
	d := p.Decision.Decide(&s.pf)
	var up *upstream.Tracked
	if d.Action != rules.Proxy || !loopUpstream(p, d.Proxy, &up) || r.resolved != nil && p.Decision.NeedsResolve(&s.pf) ||
		r.uploadOffLoop(p, &s.pf) {
		return false
	}
	s.dst = dstOf(&s.pf)
	if s.slots = r.adm.trySetup(key, s.dst); !s.slots {
		return false
	}
	s.slotsAt = time.Now()
	sd := upstream.Addr{IP: f.Dst.Addr(), Port: f.Dst.Port()}
	if f.Host != "" {
		sd = upstream.Addr{Name: f.Host, Port: f.Dst.Port()}
	}
	if s.target, s.slots = up.Begin(&s.hs, sd); !s.slots {
		r.adm.endSetup(key, s.dst, time.Time{})
		return false
	}
	s.proxied, f.Via = true, d.Proxy
	s.spec, s.awaiting, s.nameBy = d, true, l.now()+sniffWait
	l.setTick(sniffWait)
	r.loops.setups.Add(1)
	l.connect(s)
	return true
}

// nameIn goes on with a speculated flow s once its first bytes may carry their name (final:
// the wait is over, or the client ended its side): the decision with the name, and the
// handshake when it stands (the connect may still run: connected starts it then); else the
// speculative connection is closed and the flow decided afresh.
func (l *loop) nameIn(s *setupFlow, final bool) {
	res, first, ok := l.peekName(s, final)
	if !ok {
		return
	}
	r, p, f := s.ls.r, s.p, &s.f
	s.awaiting = false
	host := f.Host
	pf := s.pf
	s.pf = policy.Flow{}
	r.sniffed(p, f, &pf, res, first)
	s.h.sniffed = true
	d := p.Decision.Decide(&pf)
	if d.Verdict == s.spec.Verdict && d.Step == s.spec.Step && f.Host == host && !p.isBrokered(&pf, d) {
		f.query = pf
		r.decided(p, f, d)
		if s.state == sNamePending {
			l.handshake(s)
		}
		return
	}
	s.hs.Abandon()
	l.endSlots(s)
	s.setup, s.proxied, s.hs, s.target, f.Via, s.spec = nil, false, upstream.Handshake{}, netip.AddrPort{}, "", policy.Decision{}
	if s.fd[1] >= 0 {
		closeFD(s.fd[1]) // out of the epoll with it
		s.fd[1] = -1
	}
	l.unslot(s)
	l.decide(s, &pf)
}

// awaitName registers s's client on l until its first bytes are in (setupEvent, side 0) or
// sniffWait has passed (the sweep's expire): then named goes on.
func (l *loop) awaitName(s *setupFlow) {
	s.setup, s.state = s, sSniffing
	s.deadline = l.now() + sniffWait
	s.last = l.now()
	l.mu.Lock()
	l.slotLocked(&s.relayFlow)
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: s.slot}
	err := rawEpollCtl(l.epfd, unix.EPOLL_CTL_ADD, s.fd[0], &ev)
	if err != nil {
		l.slots[s.slot] = nil
		l.free = append(l.free, s.slot)
		s.slot = -1
	}
	l.setTickLocked(sniffWait)
	l.mu.Unlock()
	if err != nil {
		s.setup = nil
		s.f.Err = fmt.Errorf("event loop: wait for the first bytes: epoll add: %w", err)
		l.endEarly(s)
		return
	}
	// Bytes that came in between the look and the registration raised no edge.
	l.named(s, false)
}

// named goes on with s once its first bytes may carry their name (final: the wait is over,
// or the client ended its side): their name, then decide.
func (l *loop) named(s *setupFlow, final bool) {
	res, first, ok := l.peekName(s, final)
	if !ok {
		return
	}
	s.setup = nil
	l.unslot(s)
	pf := s.pf
	s.pf = policy.Flow{}
	s.ls.r.sniffed(s.p, &s.f, &pf, res, first)
	s.h.sniffed = true
	l.decide(s, &pf)
}

// unslot takes s's client off l (named: the flow goes on as one just accepted).
func (l *loop) unslot(s *setupFlow) {
	if s.slot < 0 {
		return
	}
	rawEpollCtl(l.epfd, unix.EPOLL_CTL_DEL, s.fd[0], &unix.EpollEvent{})
	l.mu.Lock()
	if int(s.slot) < len(l.slots) && l.slots[s.slot] == &s.relayFlow {
		l.slots[s.slot] = nil
		l.free = append(l.free, s.slot)
	}
	l.mu.Unlock()
	s.slot = -1
}

// decide goes on with a classified flow that holds its share (and its name, when the policy
// asked for it): the policy's decision, the set-up slots, the connect; or a hand-off to the
// goroutine path for a slow step.
func (l *loop) decide(s *setupFlow, pf *policy.Flow) {
	r, p, f, key := s.ls.r, s.p, &s.f, s.h.key
	r.canary(p, f, pf, "", nil) // the fake IP's name
	d := p.Decision.Decide(pf)
	if d.Action == rules.Ask {
		l.handOff(s, pf, true) // held while the router asks: a goroutine's wait
		return
	}
	if !admits(d) {
		r.decided(p, f, d)
		if answersRefusal(d) {
			l.answerRefused(s, d)
			return
		}
		l.endEarly(s)
		return
	}
	// The slow steps: a name to resolve, a direct flow by name, an upstream the loop cannot
	// speak to, a flow to a model gate, a guest past its upload budget (refused there) or an
	// upload budget that asks (relayed off the loops); and
	// no set-up slot free now.
	var up *upstream.Tracked
	switch {
	case r.resolved != nil && p.Decision.NeedsResolve(pf):
	case r.uploadOffLoop(p, pf):
	case d.Action == rules.Direct && d.ByName:
	case d.Action == rules.Proxy && !loopUpstream(p, d.Proxy, &up):
	case d.Action == rules.Direct && p.gated(pf, d): // served by a forward's gate (forward_gate.go)
	case p.isBrokered(pf, d): // read request by request (flow_credential.go)
	default:
		s.dst = dstOf(pf)
		if s.slots = r.adm.trySetup(key, s.dst); s.slots {
			s.slotsAt = time.Now()
		}
	}
	if s.slots && up != nil {
		sd := upstream.Addr{IP: f.Dst.Addr(), Port: f.Dst.Port()}
		if f.Host != "" {
			sd = upstream.Addr{Name: f.Host, Port: f.Dst.Port()}
		}
		if s.target, s.slots = up.Begin(&s.hs, sd); !s.slots {
			r.adm.endSetup(key, s.dst, time.Time{})
		}
		s.proxied, f.Via = true, d.Proxy
	}
	if !s.slots {
		l.handOff(s, pf, true)
		return
	}
	if !s.proxied {
		s.target = f.Dst
	}
	f.query = *pf
	r.decided(p, f, d)
	r.loops.setups.Add(1)
	l.connect(s)
}

// loopUpstream finds the upstream the loop can speak to itself for proxy name: one SOCKS5
// proxy (a failover list takes the goroutine path).
func loopUpstream(p *compiled, name string, up **upstream.Tracked) bool {
	u, err := p.upstream(name)
	if err != nil {
		return false
	}
	t, ok := u.(*upstream.Tracked)
	*up = t
	return ok
}

// handOff gives s's flow to the goroutine path: from classified (its owner to find), or,
// once it holds its share, from admitted.
func (l *loop) handOff(s *setupFlow, pf *policy.Flow, shared bool) {
	r, f := s.ls.r, &s.f
	c, err := fileConn(s.fd[0])
	s.fd[0] = -1
	if err != nil {
		f.Err = fmt.Errorf("hand the flow to a goroutine: %w", err)
		r.endFlowLater(f, func() { r.release(s.h) })
		return
	}
	own := *pf
	if shared {
		go r.admitted(s.ls.ctx, s.p, f, c, &own, s.h)
	} else {
		go r.classified(s.ls.ctx, s.p, f, c, &own, nil)
	}
}

// connect starts s's connection to its target and registers the flow on l.
func (l *loop) connect(s *setupFlow) {
	r := s.ls.r
	s.setup, s.state = s, sConnecting
	s.deadline = l.now() + s.p.ConnectTimeout
	fd, done, err := r.connectFD(&l.raw, s.target)
	if err != nil {
		l.fail(s, l.dialError(s, err))
		return
	}
	s.fd[1] = fd
	// After the connect, which is what waits: the SYN is out first. No delay, as Go sets it
	// on every TCP connection; its keep-alive comes later (keepAfter).
	rawSetsockoptInt(s.fd[0], unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if err := l.own(&s.relayFlow); err != nil {
		l.fail(s, l.dialError(s, err))
		return
	}
	l.setTick(s.p.ConnectTimeout / 2)
	if done {
		l.connected(s, unix.EPOLLOUT)
	}
}

// own registers f, set up by l itself, on l: both descriptors, edge-triggered, for the
// set-up and then the relay.
func (l *loop) own(f *relayFlow) error {
	f.last = l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slotLocked(f)
	for side, fd := range f.fd {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: f.slot, Pad: int32(side)}
		if err := rawEpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			l.slots[f.slot] = nil
			l.free = append(l.free, f.slot)
			f.slot = -1
			return fmt.Errorf("epoll add: %w", err)
		}
	}
	return nil
}

// setupEvent moves s's set-up on an event of its descriptor side.
func (l *loop) setupEvent(s *setupFlow, side int, ev uint32) {
	if side == 0 {
		if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			final := ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
			switch {
			case s.state == sSniffing:
				l.named(s, final)
			case s.awaiting:
				l.nameIn(s, final)
			}
		}
		return // the client's bytes wait for the relay, which finds its end or its error too
	}
	switch s.state {
	case sNamePending:
		if ev&(unix.EPOLLERR|unix.EPOLLHUP|unix.EPOLLRDHUP) != 0 {
			l.fail(s, s.hs.End(s.hs.Cut(nil, l.sockErr(s.fd[1], io.EOF))))
		}
	case sConnecting:
		if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			l.connected(s, ev)
		}
	case sSending:
		if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			l.send(s, s.pending)
		}
	case sAnswers:
		l.answers(s, ev)
	}
}

// connected goes on once the connect ended (ev: the readiness that said so): a direct flow
// is relayed; a proxied one sends its handshake, with the client's first bytes when the
// proxy pipelines.
func (l *loop) connected(s *setupFlow, ev uint32) {
	// A connect that failed says so with EPOLLERR (or EPOLLHUP); writable alone is success.
	if ev&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		err := l.sockErr(s.fd[1], unix.ECONNRESET)
		l.fail(s, l.dialError(s, err))
		return
	}
	if !s.proxied {
		l.ready(s)
		return
	}
	if s.awaiting {
		s.state = sNamePending // nameIn starts the handshake once the name stands
		return
	}
	l.handshake(s)
}

// handshake sends s's handshake to its proxy, with the client's first bytes when the proxy
// pipelines.
func (l *loop) handshake(s *setupFlow) {
	buf := l.buf[:]
	early := 0
	if s.hs.Pipelined() {
		early, _ = recvNow(s.fd[0], buf[handshakeRoom:handshakeRoom+earlyMax]) // nothing on an error
	}
	out, err := s.hs.Start(buf[:0:handshakeRoom], early)
	if err != nil {
		l.fail(s, s.hs.End(err))
		return
	}
	n := copy(buf[len(out):], buf[handshakeRoom:handshakeRoom+early])
	s.f.Up = int64(early)
	s.f.bytes.up.Store(s.f.Up)
	l.send(s, buf[:len(out)+n])
	if !s.closed && s.hs.Pipelined() {
		// The proxy's answers come in pieces (go-socks5 writes the method selection at once,
		// the reply once it connected): wake for the reply only. Every valid conversation
		// sends that much; the end of the stream or an error wakes the loop regardless.
		s.lowat = rawSetsockoptInt(s.fd[1], unix.SOL_SOCKET, unix.SO_RCVLOWAT, s.hs.LeastAnswer()) == nil
	}
}

// send writes b (the handshake's next bytes) to the proxy; what the socket does not take now
// waits in s.pending for EPOLLOUT.
func (l *loop) send(s *setupFlow, b []byte) {
	n, err := writeNow(s.fd[1], b)
	if err != nil {
		l.fail(s, s.hs.End(s.hs.WriteFailed(err)))
		return
	}
	if n < len(b) {
		s.pending, s.state = append(s.pending[:0], b[n:]...), sSending
		return
	}
	s.pending, s.state = nil, sAnswers
}

// answers takes the proxy's answers that are in: it looks at them without taking them
// (MSG_PEEK), lets the handshake consume whole messages, and takes exactly those, so the
// destination's first bytes stay in the socket for the relay.
func (l *loop) answers(s *setupFlow, ev uint32) {
	ended := ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	for {
		n, err := recvPeek(s.fd[1], l.buf[:answersRoom])
		switch {
		case err == unix.EAGAIN:
			if ended {
				l.fail(s, s.hs.End(s.hs.Cut(nil, l.sockErr(s.fd[1], io.EOF))))
			}
			return
		case err != nil:
			l.fail(s, s.hs.End(s.hs.Cut(nil, err)))
			return
		case n == 0:
			l.fail(s, s.hs.End(s.hs.Cut(nil, io.EOF)))
			return
		}
		in := l.buf[:n]
		m, next, err := s.hs.Feed(in, l.out[:0])
		if m > 0 {
			recvNow(s.fd[1], l.buf[:m]) // what was looked at: it is in the socket
		}
		if err != nil {
			l.fail(s, s.hs.End(err))
			return
		}
		if len(next) > 0 {
			l.send(s, next)
			if s.closed {
				return
			}
		}
		if s.hs.Done() {
			l.ready(s)
			return
		}
		if m > 0 && s.lowat {
			// What is still to come may be fewer bytes than the mark: wake for any.
			s.lowat = rawSetsockoptInt(s.fd[1], unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) != nil
		}
		if m == 0 {
			if ended {
				l.fail(s, s.hs.End(s.hs.Cut(in, io.EOF)))
			}
			return
		}
	}
}

// sockErr is the socket's pending error, or def when it has none.
func (l *loop) sockErr(fd int, def error) error {
	if e, err := rawGetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && e != 0 {
		return unix.Errno(e)
	}
	return def
}

// ready hands a connected flow to the relay, on l: it is open.
func (l *loop) ready(s *setupFlow) {
	r, f := s.ls.r, &s.f
	if s.proxied {
		s.hs.End(nil)
	}
	if s.lowat {
		rawSetsockoptInt(s.fd[1], unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) // the relay takes any byte
	}
	l.endSlots(s)
	r.logLater(f, true)
	f.relayed = true
	s.setup = nil
	s.keep = l.now() + keepAfter
	rl := r.relayFor(s.p)
	f.bytes.upload.Add(f.Up) // the first bytes, sent with the handshake: counted (the relay cuts)
	rl.begin(l, &s.relayFlow, &f.bytes, r.relayed(f, func() { r.release(s.h) }), true)
}

// dialError is the error of s's failed connect, worded as the goroutine path's.
func (l *loop) dialError(s *setupFlow, err error) error {
	cause := fmt.Errorf("dial tcp %s: connect: %w", s.target, err)
	if s.proxied {
		return s.hs.End(s.hs.DialFailed(cause))
	}
	return fmt.Errorf("connect direct: %w", cause)
}

// expire ends a set-up that ran out of time.
func (l *loop) expire(s *setupFlow) {
	if s.state == sSniffing {
		l.named(s, true) // the wait is over: the bytes that are in, named or not
		return
	}
	if s.proxied {
		l.fail(s, s.hs.End(s.hs.Expired(s.state != sConnecting, nil)))
		return
	}
	l.fail(s, fmt.Errorf("connect direct: dial tcp %s: %w (%w)", s.target, os.ErrDeadlineExceeded, context.DeadlineExceeded))
}

// fail ends a flow whose connect or handshake failed: the client gets a reset.
func (l *loop) fail(s *setupFlow, err error) {
	r, f := s.ls.r, &s.f
	f.Err = err
	if s.proxied && upstreamDown(err) {
		r.refused(refusal.UpstreamDown, f)
	}
	l.drop(s)
}

// abort ends a set-up the loop gives up on (the router or Serve stopping): the upstream's
// health counts nothing.
func (l *loop) abort(s *setupFlow, err error) {
	if s.proxied {
		s.hs.Abandon()
	}
	s.f.Err = err
	l.drop(s)
}

// drop ends a set-up flow that failed: its slots, its descriptors (the client's with a
// reset), its place on l, then the record.
func (l *loop) drop(s *setupFlow) {
	r := s.ls.r
	l.endSlots(s)
	s.closed = true
	if s.slot >= 0 {
		l.mu.Lock()
		if int(s.slot) < len(l.slots) && l.slots[s.slot] == &s.relayFlow {
			l.slots[s.slot] = nil
			l.free = append(l.free, s.slot)
		}
		l.mu.Unlock()
	}
	s.setup = nil
	if s.fd[1] >= 0 {
		closeFD(s.fd[1])
	}
	resetFD(s.fd[0])
	r.endFlowLater(&s.f, func() { r.release(s.h) })
}

// endFlowLater is endFlow for a caller that must not wait for the log's writer (an event
// loop): the record is written in order on the log's goroutine.
func (r *Router) endFlowLater(f *FlowRecord, release func()) {
	r.finish(f)
	if release != nil {
		release()
	}
	r.logLater(f, false)
}

// endEarly ends a flow refused before its connect: a reset, and the record.
func (l *loop) endEarly(s *setupFlow) {
	r := s.ls.r
	s.closed = true
	resetFD(s.fd[0])
	r.endFlowLater(&s.f, func() { r.release(s.h) })
}

// endSlots gives back s's set-up slots, once.
func (l *loop) endSlots(s *setupFlow) {
	if s.slots {
		s.slots = false
		s.ls.r.adm.endSetup(s.h.key, s.dst, s.slotsAt)
	}
}

// refuseFD resets a connection refused at accept, and counts the refusal.
func (r *Router) refuseFD(fd int, src netip.AddrPort, why error) {
	resetFD(fd)
	r.book.Add(refusal.Limit, refusal.Event{Src: src})
	if r.refuse.note(why.Error(), src.Addr().String()) {
		go r.log.Warn("flow refused", "src", src, "err", why.Error())
	}
}

// connectFD opens one of the router's own sockets to dst (Options.ConnectFD, or a socket of
// dst's family with Control applied) and starts a non-blocking connect; done is true when it
// connected at once. raw is the loop's holder for Control's RawConn.
func (r *Router) connectFD(raw *rawFD, dst netip.AddrPort) (fd int, done bool, err error) {
	if r.opts.ConnectFD != nil {
		fd, err := r.opts.ConnectFD(dst)
		return fd, false, err
	}
	return dialFD(raw, r.opts.Control, dst)
}

// keepAfter is the age at which a flow the loop set up gets Go's keep-alive probes: short
// flows, most of them, never pay its four system calls a socket, and a flow idle from the
// start is probed at most keepAfter later than a goroutine's.
const keepAfter = 5 * time.Second

// keepAliveDue sets keep-alive on f's sockets once its time came (f.keep).
func (f *relayFlow) keepAliveDue(now time.Duration) {
	if f.keep != 0 && now >= f.keep {
		f.keep = 0
		keepAlive(f.fd[0], 15*time.Second)
		keepAlive(f.fd[1], 30*time.Second)
	}
}

// What only the loops' set-up asks of the other ideas (the goroutine path waits instead,
// or has no need): kept here, with the loops, so no other build carries them unused.

// trySetup takes a set-up slot of source key and one of destination dst, if both are free
// now and nobody waits for a slot (waiters are served first); false: nothing is taken, and
// the flow must wait (setup) on a goroutine of its own. endSetup gives them back. The
// loops' set-up (loop_setup_linux.go) takes its slots so, without waiting; a flow that
// would wait takes the goroutine path.
func (a *admission) trySetup(key string, dst dstKey) bool {
	if !a.dstTryAcquire(dst) {
		return false
	}
	if !a.setups.tryAcquireNow(key) {
		a.dstRelease(dst, time.Time{})
		return false
	}
	return true
}

// tryAcquireNow takes a slot for key when acquire would take one without waiting: one is
// free within key's share and nobody waits (waiters go first).
func (s *shares) tryAcquireNow(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) != 0 || !s.grantableLocked(key) {
		return false
	}
	s.takeLocked(key)
	return true
}

// gated reports whether pf, decided d under p, is served by a model gate (the event loop
// hands such a flow to the goroutine path).
func (p *compiled) gated(pf *policy.Flow, d policy.Decision) bool {
	_, ok := p.gate(pf, d)
	return ok
}

// uploadOffLoop reports whether pf's flow is set up off the event loop (the goroutine path)
// for its upload budget: its guest is past it (refused there), or the budget asks past it
// (upload.Ask: the flow is relayed by copyRelay, whose goroutine may wait for the answer,
// never by the loops, whose flows share a goroutine).
func (r *Router) uploadOffLoop(p *compiled, pf *policy.Flow) bool {
	b := r.opts.Uploads
	return b != nil && b.Limits().Over == upload.Ask || r.uploadRefuses(p, pf)
}
