package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// UDP. A capture hands the router datagrams with their original destination (HandleUDP, or
// ServeUDP reading a capture's socket); the router decides each flow (source, destination)
// once, with the same policy.Decide as TCP (Network UDP), and then:
//
//   - proxy: the datagram goes through a UDP association of the rule's upstream (SOCKS5 UDP
//     ASSOCIATE), with the destination's name when one is known (a fake IP's name goes as
//     ATYP domain). One association per (source address:port, upstream): a client socket
//     that talks to many destinations uses one association, as a NAT would give it one
//     mapping. It is opened at the first datagram (datagrams that come meanwhile wait, 16 at
//     most), kept while any of its flows is used, and closed when the last one has been
//     idle for udpIdle. When its control connection ends, the association's flows end with
//     it; the next datagram makes a new flow and a new association. An association the
//     upstream refuses (or that fails) leaves its flows dropping datagrams for udpRetry,
//     then the next datagram tries again. Nothing ever falls back to direct.
//   - direct (a rule that sends it direct): the router's own socket (marked: never
//     captured), one per flow; a fake IP is resolved through the proxy first.
//   - anything else (block, DNS that reached the relay, a local destination, an owner that
//     the policy needs and Options.OwnerUDP could not find): dropped.
//
// Answers: a datagram that comes back through an association carries the address it came
// from. It goes back to the client of the association, as if from the original destination
// of the flow that address belongs to: the address the flow's datagrams were sent to (an IP,
// or the name), or, for a flow sent by name, an IP with the same port (the proxy resolved
// the name and reports where the answer came from). A datagram from any other address is
// dropped: only destinations the client sent to may answer it.
//
// Bounds, so that a guest cannot exhaust the router's descriptors: maxUDPFlows and
// maxUDPSessions associations (or direct sockets) in all, shared fairly between guests
// (guestOf: a VM network, an app; a quarter kept for a guest not yet seen, see shares), and
// inside a guest's share maxUDPFlowsPerSource flows and maxUDPSessionsPerSource
// associations per source address; a datagram beyond them is dropped. A capture's
// return path (UDPReturn) holds at most one thing per flow.
//
// Each flow is logged when it ends ("udp flow", the attributes of a TCP flow's record) and
// counted under its rule; the running ones appear in Status.
const (
	udpIdle                 = 60 * time.Second // a flow without datagrams either way ends
	udpRetry                = 5 * time.Second  // after an association failed, its flows drop datagrams
	udpSweep                = 5 * time.Second  // expiry period
	udpQueue                = 16               // datagrams waiting per association being opened
	maxUDPFlowsPerSource    = 512
	maxUDPFlows             = 8192
	maxUDPSessionsPerSource = 32
	maxUDPSessions          = 1024
)

// No datagram is ever changed: the buffers hold the largest datagram there is (a reader per
// association holds one of upstream.ReadBufLen bytes while it waits), and a datagram a path
// cannot carry whole (with the proxy's header more than a UDP socket can send, an answer the
// capture cannot give back) is dropped whole and counted as udp-oversize.

// Datagram is one UDP datagram a capture took.
type Datagram struct {
	Src, Dst netip.AddrPort // the sender and the destination it was sent to
	// Payload is the caller's; the router copies what it keeps.
	Payload []byte
	// Owner is the sending process when the capture knows it (OwnerKnown; the Windows
	// engine, which decided with the same knowledge). Otherwise it is looked up with
	// Options.OwnerUDP when the policy needs it; a lookup that fails refuses the flow (the
	// socket may be gone, and a caged app's datagram must not go direct for that).
	Owner      rules.Owner
	OwnerKnown bool
}

// UDPReturn is how a capture sends answers back to its clients. Its methods are called from
// the router's goroutines, concurrently.
type UDPReturn interface {
	// Reply sends p to client as if from from, the original destination of one of the
	// client's flows. It must not keep p and must not block for long.
	Reply(client, from netip.AddrPort, p []byte) error
	// Release says that the flow client → from ended: what Reply kept for it may go.
	Release(client, from netip.AddrPort)
}

// UDPReader is a capture's socket of captured datagrams (Linux: nftcap.UDPConn).
type UDPReader interface {
	// ReadFrom reads one datagram into b: its length, sender and original destination.
	ReadFrom(b []byte) (n int, src, dst netip.AddrPort, err error)
}

// ServeUDP reads captured datagrams from conn and relays them (HandleUDP), answering through
// ret, until conn fails with net.ErrClosed (then it returns nil) or ctx is done. A datagram
// that cannot be read whole (its destination unknown) is skipped.
func (r *Router) ServeUDP(ctx context.Context, conn UDPReader, ret UDPReturn) error {
	buf := make([]byte, 65535)
	for ctx.Err() == nil {
		n, src, dst, err := conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			r.log.Debug("udp read", "err", err)
			continue
		}
		r.HandleUDP(Datagram{Src: src, Dst: dst, Payload: buf[:n]}, ret)
	}
	return nil
}

// HandleUDP relays one captured datagram of the flow dg.Src → dg.Dst (see the UDP comment
// above), answering through ret. A new flow is decided here (a policy decision, an owner
// lookup when needed); opening an association or a socket happens on a goroutine of its
// own, so HandleUDP does not wait for the network.
func (r *Router) HandleUDP(dg Datagram, ret UDPReturn) {
	t := &r.udp
	dg.Src, dg.Dst = unmapAP(dg.Src), unmapAP(dg.Dst)
	key := udpFlowKey{dg.Src, dg.Dst}
	now := time.Now()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.start(r)
	fl := t.flows[key]
	t.mu.Unlock()
	if fl == nil {
		fl = r.newUDPFlow(dg, ret)
		if fl == nil {
			return
		}
	}
	fl.last.Store(now.UnixNano())
	t.mu.Lock()
	s := fl.sess
	if fl.resolving && !fl.ended && len(fl.wait) < udpQueue {
		fl.wait = append(fl.wait, append([]byte(nil), dg.Payload...))
	}
	if fl.drop || s == nil || fl.ended {
		t.mu.Unlock()
		return
	}
	if s.assoc == nil {
		if s.failed.IsZero() && len(s.queue) < udpQueue {
			s.queue = append(s.queue, queued{fl: fl, p: append([]byte(nil), dg.Payload...)})
		}
		t.mu.Unlock()
		return
	}
	a := s.assoc
	t.mu.Unlock()
	r.sendUDP(fl, a, dg.Payload)
}

// udpTable holds the UDP flows and their associations. mu guards every field, and the
// fields of udpFlow and udpSession that say so.
type udpTable struct {
	mu       sync.Mutex
	flows    map[udpFlowKey]*udpFlow
	sessions map[sessionKey]*udpSession
	sources  map[netip.Addr]*udpBudget
	closed   bool
	stop     chan struct{} // closes the expiry goroutine; nil until the first datagram
	sweeper  sync.WaitGroup
	ending   sync.WaitGroup // flows ending: their release and log record

	// flowShares and sessShares share maxUDPFlows and maxUDPSessions between guests
	// (guestOf), by the flow's and the session's guest; made with flows.
	flowShares, sessShares *shares
}

type udpFlowKey struct{ src, dst netip.AddrPort }

// sessionKey names an association (via: the proxy a rule names) or a direct socket (via:
// "direct", one per flow: dst set).
type sessionKey struct {
	src netip.AddrPort
	via string
	dst netip.AddrPort
}

type udpBudget struct{ flows, sessions int }

// udpFlow is one flow (source, original destination) and its decision.
type udpFlow struct {
	key     udpFlowKey
	rec     *FlowRecord   // the log record; Up, Down and Err are filled at the end
	guest   string        // whose shares it holds (sourceKey)
	to      upstream.Addr // what the association is given: the name, or the IP
	ret     UDPReturn
	release func() // the fake IP's name, held while the flow lives; nil when none
	last    atomic.Int64

	// Guarded by udpTable.mu.
	drop  bool        // refused: its datagrams are dropped until it expires
	sess  *udpSession // nil when drop, or while its name is looked up
	ended bool
	// resolving: the flow's name is being looked up (the policy asked: resolveUDP); its
	// first datagrams wait (at most udpQueue) and it is not counted yet.
	resolving bool
	wait      [][]byte
	resolved  []netip.Addr // what the name resolved to, checked by the policy; nil: not looked up
}

// udpSession is an association (or a direct socket) and the flows that use it.
type udpSession struct {
	key   sessionKey
	guest string // whose share of sessions it holds
	// Guarded by udpTable.mu.
	assoc  upstream.Association // nil while it is being opened, or after it failed
	via    string               // the member of a failover list that carries it
	failed time.Time            // when opening it failed; zero otherwise
	err    error
	queue  []queued
	flows  map[upstream.Addr]*udpFlow // by the address the association is given
}

type queued struct {
	fl *udpFlow
	p  []byte
}

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// start starts the expiry goroutine once; called with t.mu held.
func (t *udpTable) start(r *Router) {
	if t.flows != nil {
		return
	}
	t.flows = map[udpFlowKey]*udpFlow{}
	t.sessions = map[sessionKey]*udpSession{}
	t.sources = map[netip.Addr]*udpBudget{}
	t.flowShares = newShares(maxUDPFlows, maxUDPFlows/4, maxUDPFlowsPerSource, 0)
	t.sessShares = newShares(maxUDPSessions, maxUDPSessions/4, maxUDPSessionsPerSource, 0)
	stop := make(chan struct{})
	t.stop = stop
	t.sweeper.Go(func() {
		tk := time.NewTicker(udpSweep)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tk.C:
				r.sweepUDP(now)
			}
		}
	})
}

// newUDPFlow classifies and decides the first datagram's flow and adds it to the table. It
// returns nil when the flow cannot be kept (the bounds, or the router closed): the datagram
// is dropped and nothing is remembered.
func (r *Router) newUDPFlow(dg Datagram, ret UDPReturn) *udpFlow {
	p := r.pol.Load()
	f := r.newFlow(dg.Src)
	f.udp = true
	f.Dst = dg.Dst
	fl := &udpFlow{key: udpFlowKey{dg.Src, dg.Dst}, rec: f, ret: ret, to: upstream.Addr{IP: dg.Dst.Addr(), Port: dg.Dst.Port()}}
	pf := policy.Flow{Network: rules.UDP, Src: f.Src.Addr(), Dst: f.Dst.Addr(), Port: f.Dst.Port()}
	if r.opts.FromVM != nil {
		pf.FromVM = r.opts.FromVM(pf.Src)
	}
	if r.opts.CagedSocket != nil {
		pf.CagedSocket = r.opts.CagedSocket(f.Src, f.Dst)
	}
	var ownerErr error
	if p.Decision.NeedsOwner(&pf) {
		info, known := dg.Owner, dg.OwnerKnown
		if !known && r.opts.OwnerUDP != nil {
			var err error
			if info, err = r.opts.OwnerUDP(f.Src, f.Dst); err == nil {
				known = true
			} else {
				ownerErr = err
			}
		}
		if known {
			pf.Learn(info)
			f.Owner = pf.Owner
		}
	}
	// A switched guest's profile, once the owner is known (profile.go); every profile asks
	// for the owner alike.
	p = r.forGuest(p, &pf)
	if n := r.opts.Names; n != nil {
		if n.InPool(pf.Dst) {
			if name, rel, ok := n.Acquire(pf.Dst); ok {
				pf.Host, fl.release = name, rel
			}
		} else if name, ok := n.NameFor(pf.Dst); ok {
			pf.Host = name
		}
	}
	f.Host = pf.Host
	if f.Host != "" {
		f.NameFrom = "dns"
	}
	if pf.Host != "" {
		fl.to = upstream.Addr{Name: pf.Host, Port: f.Dst.Port()}
	}
	d := p.Decision.Decide(&pf)
	f.Verdict, f.Step, f.pol, f.index, f.Caged = d.Verdict, d.Step, p, d.Index, d.Caged
	f.query = pf
	switch {
	case ownerErr != nil:
		// The owner could change the decision (a caged app): without it the flow is refused,
		// never sent.
		f.Err = fmt.Errorf("owner unknown: %w", ownerErr)
		fl.drop = true
	case d.Step == policy.StepDNS || d.Step == policy.StepLocal || d.Step == policy.StepHost && d.Action == rules.Direct:
		// DNS belongs to the DNS server and local destinations are never captured: reaching
		// the relay is a capture fault.
		f.Err = fmt.Errorf("udp to %v is not relayed (%s)", f.Dst, d.Step)
		fl.drop = true
	case d.Action != rules.Proxy && d.Action != rules.Direct:
		fl.drop = true
	case r.resolved != nil && p.Decision.NeedsResolve(&pf):
		// The name's addresses decide (the host walls): looked up off the reader.
		fl.resolving = true
	}

	t := &r.udp
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		fl.releaseName()
		return nil
	}
	if old := t.flows[fl.key]; old != nil { // another reader decided it meanwhile
		t.mu.Unlock()
		fl.releaseName()
		return old
	}
	b := t.budget(fl.key.src.Addr())
	fl.guest = sourceKey(&pf, p)
	if b.flows >= maxUDPFlowsPerSource || !t.flowShares.tryAcquire(fl.guest) {
		t.dropBudget(fl.key.src.Addr())
		t.mu.Unlock()
		fl.releaseName()
		r.log.Debug("udp flow refused: too many flows", "src", f.Src, "dst", f.Dst, "source_flows", b.flows)
		r.refused(refusal.Limit, f)
		return nil
	}
	if fl.resolving {
		b.flows++
		t.flows[fl.key] = fl
		t.mu.Unlock()
		go r.resolveUDP(p, fl, pf) // shown by status once decided
		return fl
	}
	p.count(d)
	r.caged.note(f, d)
	if !fl.drop {
		if !r.joinSessionLocked(p, fl, d) {
			t.flowShares.release(fl.guest)
			t.dropBudget(fl.key.src.Addr())
			t.mu.Unlock()
			fl.releaseName()
			r.log.Debug("udp flow refused: too many associations", "src", f.Src, "dst", f.Dst)
			r.refused(refusal.Limit, f)
			return nil
		}
	}
	b.flows++
	t.flows[fl.key] = fl
	t.mu.Unlock()
	r.live.add(f)
	if fl.drop {
		// Counted once per flow; its later datagrams follow the decision silently.
		why := refusal.ForStep(d.Step)
		switch {
		case f.Err != nil:
			why = refusal.Capture
		case d.Action == rules.Ask: // UDP is never held: an ask refuses it
			why = refusal.AskDenied
		}
		r.refused(why, f)
	}
	return fl
}

// resolveUDP looks the name of fl up (the policy asked: a caged flow leaving from this
// machine by its name), decides it again with the addresses, and then joins its session or
// drops it, like newUDPFlow; the datagrams that waited go on.
func (r *Router) resolveUDP(p *compiled, fl *udpFlow, pf policy.Flow) {
	ctx, cancel := context.WithTimeout(context.Background(), p.ConnectTimeout)
	pf.Resolved = r.resolved.lookup(ctx, pf.Host)
	cancel()
	d := p.Decision.Decide(&pf)
	f := fl.rec
	t := &r.udp
	t.mu.Lock()
	f.query = pf
	f.Verdict, f.Step, f.index, f.Caged = d.Verdict, d.Step, d.Index, d.Caged
	wait := fl.wait
	fl.resolving, fl.wait, fl.resolved = false, nil, pf.Resolved
	if fl.ended || t.closed {
		t.mu.Unlock()
		return
	}
	r.live.add(f)
	p.count(d)
	var why refusal.Reason
	switch {
	case d.Action != rules.Proxy && d.Action != rules.Direct:
		fl.drop, why = true, refusal.ForStep(d.Step)
		if d.Action == rules.Ask {
			why = refusal.AskDenied
		}
	case !r.joinSessionLocked(p, fl, d):
		fl.drop, why = true, refusal.Limit
		f.Err = errors.New("too many associations")
	}
	var a upstream.Association
	if !fl.drop {
		if s := fl.sess; s.assoc == nil {
			for _, q := range wait {
				if s.failed.IsZero() && len(s.queue) < udpQueue {
					s.queue = append(s.queue, queued{fl: fl, p: q})
				}
			}
			wait = nil
		} else {
			a = s.assoc
		}
	}
	t.mu.Unlock()
	if fl.drop {
		r.refused(why, f)
		return
	}
	for _, q := range wait {
		if a != nil {
			r.sendUDP(fl, a, q)
		}
	}
}

// budget returns src's budget, made on first use; called with t.mu held.
func (t *udpTable) budget(src netip.Addr) *udpBudget {
	b := t.sources[src]
	if b == nil {
		b = &udpBudget{}
		t.sources[src] = b
	}
	return b
}

// joinSessionLocked attaches fl to its association (or direct socket), opening one when
// needed; false when the bounds forbid a new one. Called with r.udp.mu held.
func (r *Router) joinSessionLocked(p *compiled, fl *udpFlow, d policy.Decision) bool {
	t := &r.udp
	key := sessionKey{src: fl.key.src, via: d.Proxy}
	if d.Action == rules.Direct {
		key = sessionKey{src: fl.key.src, via: "direct", dst: fl.key.dst}
		fl.to = upstream.Addr{IP: fl.key.dst.Addr(), Port: fl.key.dst.Port()}
	}
	s := t.sessions[key]
	if s == nil {
		b := t.budget(key.src.Addr())
		if b.sessions >= maxUDPSessionsPerSource || !t.sessShares.tryAcquire(fl.guest) {
			return false
		}
		b.sessions++
		s = &udpSession{key: key, guest: fl.guest, flows: map[upstream.Addr]*udpFlow{}}
		t.sessions[key] = s
		host, fake := fl.rec.Host, d.ByName // a fake IP's name (UDP carries no name of its own)
		go r.openSession(p, s, host, fake, fl.resolved)
	}
	s.flows[fl.to] = fl
	fl.sess = s
	if s.via != "" {
		fl.rec.Via = s.via
	}
	return true
}

// openSession opens s's association (or direct socket) and sends what waited for it; on
// failure its flows keep dropping datagrams until udpRetry has passed.
func (r *Router) openSession(p *compiled, s *udpSession, host string, fake bool, resolved []netip.Addr) {
	ctx, cancel := context.WithTimeout(context.Background(), p.ConnectTimeout)
	defer cancel()
	var a upstream.Association
	var via string
	var err error
	if s.key.via == "direct" {
		a, err = r.dialUDPDirect(ctx, s.key.dst, host, fake, resolved)
	} else {
		a, via, err = associate(ctx, p, s.key.via)
	}
	t := &r.udp
	t.mu.Lock()
	if err == nil && (t.closed || t.sessions[s.key] != s) {
		err = errClosed // the router closed, or every flow expired meanwhile
	}
	if err != nil {
		s.failed, s.err, s.queue = time.Now(), err, nil
		var down []*FlowRecord // the flows the association was for: refused, the proxy being down
		for _, fl := range s.flows {
			fl.rec.Err = err
			if s.key.via != "direct" && !errors.Is(err, errClosed) {
				down = append(down, fl.rec)
			}
		}
		t.mu.Unlock()
		for _, f := range down {
			r.refused(refusal.UpstreamDown, f)
		}
		if a != nil {
			a.Close()
		}
		if !errors.Is(err, errClosed) {
			r.log.Warn("udp association failed: the flows' datagrams are dropped", "src", s.key.src, "via", s.key.via,
				"retry_after", udpRetry, "err", err)
		}
		return
	}
	s.assoc, s.via = a, via
	for _, fl := range s.flows {
		if via != "" {
			fl.rec.Via = via
		}
	}
	q := s.queue
	s.queue = nil
	t.mu.Unlock()
	for _, d := range q {
		r.sendUDP(d.fl, a, d.p)
	}
	go r.readSession(s, a)
}

// associate opens an association through the upstream a rule names and returns the member
// that carries it.
func associate(ctx context.Context, p *compiled, proxy string) (upstream.Association, string, error) {
	up, err := p.upstream(proxy)
	if err != nil {
		return nil, "", err
	}
	if g, ok := up.(*upstream.Group); ok {
		return g.AssociateVia(ctx)
	}
	a, err := up.Associate(ctx)
	return a, proxy, err
}

// sendUDP sends p through a to fl's destination. A datagram the path cannot carry whole is
// dropped and counted (udp-oversize); other failures are the association's to report.
func (r *Router) sendUDP(fl *udpFlow, a upstream.Association, p []byte) {
	n, err := a.WriteTo(p, fl.to)
	if err == nil {
		fl.rec.bytes.up.Add(int64(n))
		return
	}
	if upstream.TooLarge(err) {
		r.oversize(fl, len(p), err)
	}
}

// oversize counts a datagram of n bytes of fl dropped whole because a path could not carry
// it (udp-oversize).
func (r *Router) oversize(fl *udpFlow, n int, err error) {
	r.book.Add(refusal.Oversize, refusal.Event{Src: fl.rec.Src, Dst: fl.rec.Dst, Host: fl.rec.Host, App: fl.rec.App, Rule: fl.rec.Verdict.Name})
	r.log.Debug("udp datagram dropped whole: too large for the path", "src", fl.rec.Src, "dst", fl.rec.dst(), "len", n, "err", err)
}

// readSession hands what comes back through a to the clients until a ends; then s and its
// flows end.
func (r *Router) readSession(s *udpSession, a upstream.Association) {
	buf := make([]byte, upstream.ReadBufLen)
	t := &r.udp
	for {
		n, from, err := a.ReadFrom(buf)
		if err != nil && upstream.TooLarge(err) {
			t.mu.Lock()
			fl := s.flowFor(from)
			t.mu.Unlock()
			if fl != nil {
				r.oversize(fl, n, err)
			}
			continue
		}
		if err != nil {
			t.mu.Lock()
			if t.sessions[s.key] == s {
				r.endSessionLocked(s, a.Err())
			}
			t.mu.Unlock()
			return
		}
		t.mu.Lock()
		fl := s.flowFor(from)
		t.mu.Unlock()
		if fl == nil {
			r.log.Debug("udp answer dropped: from no destination of the client", "client", s.key.src, "from", from)
			continue
		}
		fl.last.Store(time.Now().UnixNano())
		if err := fl.ret.Reply(fl.key.src, fl.key.dst, buf[:n]); err != nil {
			if upstream.TooLarge(err) {
				r.oversize(fl, n, err)
				continue
			}
			r.log.Debug("udp answer", "client", fl.key.src, "from", fl.key.dst, "err", err)
			continue
		}
		fl.rec.bytes.down.Add(int64(n))
	}
}

// flowFor returns the flow an answer from `from` belongs to (see the UDP comment), or nil.
// Called with udpTable.mu held.
func (s *udpSession) flowFor(from upstream.Addr) *udpFlow {
	if from.Name == "" {
		from.IP = from.IP.Unmap()
	}
	if fl := s.flows[from]; fl != nil {
		return fl
	}
	if from.Name != "" {
		return nil
	}
	var best *udpFlow
	for to, fl := range s.flows {
		if to.Name != "" && to.Port == from.Port && (best == nil || fl.last.Load() > best.last.Load()) {
			best = fl
		}
	}
	return best
}

// endSessionLocked removes s and ends its flows with cause; called with udpTable.mu held.
func (r *Router) endSessionLocked(s *udpSession, cause error) {
	t := &r.udp
	delete(t.sessions, s.key)
	t.sessShares.release(s.guest)
	if b := t.sources[s.key.src.Addr()]; b != nil {
		b.sessions--
		t.dropBudget(s.key.src.Addr())
	}
	for _, fl := range s.flows {
		if fl.rec.Err == nil {
			fl.rec.Err = cause
		}
		r.endFlowLocked(fl)
	}
	s.flows = map[upstream.Addr]*udpFlow{}
	if s.assoc != nil {
		go s.assoc.Close()
	}
}

// endFlowLocked removes fl and logs it on a goroutine; called with udpTable.mu held.
func (r *Router) endFlowLocked(fl *udpFlow) {
	t := &r.udp
	if fl.ended {
		return
	}
	fl.ended = true
	if t.flows[fl.key] == fl {
		delete(t.flows, fl.key)
	}
	t.flowShares.release(fl.guest)
	if b := t.sources[fl.key.src.Addr()]; b != nil {
		b.flows--
		t.dropBudget(fl.key.src.Addr())
	}
	if s := fl.sess; s != nil && s.flows[fl.to] == fl {
		delete(s.flows, fl.to)
	}
	f := fl.rec
	f.Up, f.Down = f.bytes.up.Load(), f.bytes.down.Load()
	r.finish(f)
	t.ending.Add(1)
	go func() {
		defer t.ending.Done()
		fl.releaseName()
		if !fl.drop {
			fl.ret.Release(fl.key.src, fl.key.dst)
		}
		r.logUDPFlow(f)
	}()
}

// dropBudget forgets src's budget once it holds nothing; called with udpTable.mu held.
func (t *udpTable) dropBudget(src netip.Addr) {
	if b := t.sources[src]; b != nil && b.flows <= 0 && b.sessions <= 0 {
		delete(t.sources, src)
	}
}

func (fl *udpFlow) releaseName() {
	if fl.release != nil {
		fl.release()
	}
}

// sweepUDP ends the flows idle since udpIdle, the associations left without flows and
// the failed ones whose udpRetry has passed.
func (r *Router) sweepUDP(now time.Time) {
	t := &r.udp
	idle := now.Add(-udpIdle).UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.sessions {
		if !s.failed.IsZero() && now.Sub(s.failed) >= udpRetry {
			r.endSessionLocked(s, s.err)
		}
	}
	for _, fl := range t.flows {
		if fl.last.Load() < idle {
			if fl.rec.Err == nil {
				fl.rec.Err = errIdle
			}
			r.endFlowLocked(fl)
		}
	}
	for _, s := range t.sessions {
		if len(s.flows) == 0 && s.failed.IsZero() && s.assoc != nil {
			r.endSessionLocked(s, errIdle)
		}
	}
}

// closeUDP ends every UDP flow and association (Router.Close) and returns once their
// records are written.
func (r *Router) closeUDP() {
	t := &r.udp
	t.mu.Lock()
	t.closed = true
	stop := t.stop
	t.stop = nil
	for _, s := range t.sessions {
		r.endSessionLocked(s, errClosed)
	}
	for _, fl := range t.flows {
		if fl.rec.Err == nil {
			fl.rec.Err = errClosed
		}
		r.endFlowLocked(fl)
	}
	t.mu.Unlock()
	if stop != nil {
		close(stop)
		t.sweeper.Wait()
	}
	t.ending.Wait()
}

// logUDPFlow writes f's record, like logFlow for TCP: warn for a flow that failed.
func (r *Router) logUDPFlow(f *FlowRecord) {
	lvl := flowLevel(f)
	if errors.Is(f.Err, errClosed) {
		lvl = 0 // info
	}
	if !r.log.Enabled(context.Background(), lvl) {
		return
	}
	attrs := []any{
		"id", f.ID, "src", f.Src, "dst", f.Dst,
		"rule", f.Verdict.Name, "action", f.Verdict.Action.String(),
		"up", f.Up, "down", f.Down, "duration", time.Since(f.Start).Round(time.Millisecond),
	}
	if f.Host != "" {
		attrs = append(attrs, "host", f.Host)
	}
	if f.App != "" {
		attrs = append(attrs, "app", f.App, "pid", f.PID)
	}
	if f.Via != "" {
		attrs = append(attrs, "proxy", f.Via)
	} else if f.Verdict.Proxy != "" {
		attrs = append(attrs, "proxy", f.Verdict.Proxy)
	}
	switch {
	case errors.Is(f.Err, errIdle):
		attrs = append(attrs, "end", "idle")
	case errors.Is(f.Err, errClosed):
		attrs = append(attrs, "end", "router closed")
	case f.Err != nil:
		attrs = append(attrs, "err", f.Err.Error())
	}
	r.log.Log(context.Background(), lvl, "udp flow", attrs...)
}
