package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/agentcage/router/internal/accept"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/router/sniff"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// Serve accepts redirected connections on ln until ctx is done or ln is closed; each flow is
// set up (decided, connected) on a goroutine of its own, then relayed by the loops. What
// flows may hold is budgeted by source (see admission): a flow over the descriptor budget
// is refused at accept, and set-up slots are shared fairly, so a guest flooding the
// listener cannot hold back another's flows. Accept errors (out of descriptors) pause
// accepting and never end it. Closing ln (or cancelling ctx) stops accepting; flows already
// running go on (Wait waits for them).
//
// On Linux the epoll loops accept instead, and set most flows up themselves (loop_setup_linux.go);
// the rest take the same goroutine path.
func (r *Router) Serve(ctx context.Context, ln *net.TCPListener) error {
	if ok, err := r.serveLoops(ctx, ln); ok {
		return err
	}
	port := netaddr.AddrPort(ln.Addr()).Port()
	return r.acceptLoop(ctx, ln, "accept", func(c *net.TCPConn) {
		if !r.adm.enter() {
			r.refuseAtAccept(c, errOverBudget)
			return
		}
		r.flows.Add(1)
		go r.handle(ctx, c, port) // leaves the budget and marks r.flows done when the flow ends
	})
}

// errOverBudget and errOverShare are flows refused for descriptors: the router's whole
// budget of flows is in use, or their source holds its share of it.
var (
	errOverBudget = errors.New("the router's budget of flows is in use")
	errOverShare  = errors.New("its source holds its share of the router's flows")
	errDstBusy    = errors.New("too many flows being set up to this destination")
	errNoSlot     = errors.New("no set-up slot of its source's share came free in time")
)

// admissionVerdict is the verdict logged for a flow the budgets refused before the policy
// could decide it.
var admissionVerdict = rules.Verdict{Action: rules.Block, Index: -1, Name: "(over its source's budget)"}

// refuseAtAccept resets a connection refused before any work, and counts the refusal.
func (r *Router) refuseAtAccept(c *net.TCPConn, why error) {
	src := netaddr.AddrPort(c.RemoteAddr())
	reset(c)
	r.book.Add(refusal.Limit, refusal.Event{Src: src})
	if r.refuse.note(why.Error(), src.Addr().String()) {
		r.log.Warn("flow refused", "src", src, "err", why.Error())
	}
}

// acceptLoop accepts on ln until ctx is done or ln is closed (then it returns nil) and
// gives each connection to serve. Other accept errors pause it (see package accept) and
// are counted in the refusal summary, named with what; it never returns them.
func (r *Router) acceptLoop(ctx context.Context, ln *net.TCPListener, what string, serve func(*net.TCPConn)) error {
	return accept.Loop(ctx, ln, ln.AcceptTCP, func(err error, pause time.Duration) {
		if r.refuse.note(what+" failed", ln.Addr().String()) {
			r.log.Warn(what+" failed; pausing", "err", err, "pause", pause)
		}
	}, serve)
}

// earlyMax bounds the client bytes sent along with the SOCKS request (see dialProxy).
const earlyMax = 4 << 10

// handle sets up one redirected flow: classify (where it came from and was going, who owns
// it, the name behind its address), then the steps every listener shares (flow.go): decide,
// dial, and the relay, which logs the flow and marks it done (r.flows) when it ends. A flow
// refused or failed before the relay gets a reset and is logged and marked done here.
//
// Admission (see admission): the flow entered the descriptor budget at accept; once its
// source is known (classify) it takes its share of that budget, then open takes its set-up
// slots. Its share and its place in the budget are given back when it ends.
//
// The Linux event loop runs the same steps for most flows on its own thread (loop_setup_linux.go)
// and hands a flow that needs a slow step to classified or admitted, on a goroutine.
func (r *Router) handle(ctx context.Context, c *net.TCPConn, port uint16) {
	p := r.pol.Load()
	f := r.newFlow(netaddr.AddrPort(c.RemoteAddr()))
	var pf policy.Flow
	src, dst, err := r.opts.Original(c)
	if err == nil {
		// As on the event loops (loopAccepted): only a connection to the listener's port
		// (port) can have been made to the listener itself.
		var local netip.AddrPort
		if dst.Port() == port {
			local = netaddr.AddrPort(c.LocalAddr())
		}
		err = r.addresses(f, &pf, src, dst, local)
		p = r.forGuest(p, &pf) // a switched guest's profile (profile.go)
	}
	r.classified(ctx, p, f, c, &pf, err)
}

// held is what a transparent flow holds besides its place in the descriptor budget (which
// every one holds from accept): the name behind its fake IP, and its source's share of the
// budget (key; "" until taken).
type held struct {
	names func() // nil: no name held
	key   string
	// sniffed: the event loop read the name of the flow's first bytes already (they are
	// still in the socket), so the goroutine path does not wait for them again.
	sniffed bool
}

// release gives back what h holds and the flow's place in the budget.
func (r *Router) release(h held) {
	if h.names != nil {
		h.names()
	}
	if h.key != "" {
		r.adm.flows.release(h.key)
	}
	r.adm.leave()
}

// classified goes on with a flow whose addresses are known (err: they are not): its owner
// when the policy needs it and the name behind its address (classify), its source's share of
// the budget, then admitted.
func (r *Router) classified(ctx context.Context, p *compiled, f *FlowRecord, c *net.TCPConn, pf *policy.Flow, err error) {
	if err != nil {
		f.Err = err
		r.refused(refusal.Capture, f)
		reset(c)
		r.endFlow(f, func() { r.release(held{}) })
		return
	}
	h := held{names: r.classify(c, f, pf, p)}
	p = r.forGuest(p, pf) // a switched caged app's profile, its owner known (profile.go)
	key := sourceKey(pf, p)
	if !r.adm.flows.tryAcquire(key) {
		f.Err, f.Verdict = errOverShare, admissionVerdict
		r.refused(refusal.Limit, f)
		reset(c)
		r.endFlow(f, func() { r.release(h) })
		return
	}
	h.key = key
	r.admitted(ctx, p, f, c, pf, h)
}

// admitted goes on with a flow that holds its share: open (decide, set-up slots, dial), then
// the relay, or a reset.
func (r *Router) admitted(ctx context.Context, p *compiled, f *FlowRecord, c *net.TCPConn, pf *policy.Flow, h held) {
	done := func() { r.release(h) }
	e := early{sock: c}
	if p.Decision.NeedsSniff(pf) && !h.sniffed {
		// The name the client's first bytes carry (a TLS server name, an HTTP Host), read
		// before the policy decides; the bytes go on untouched, first, through the dial.
		buf := r.sniffBufs.Get().(*[sniff.Max]byte)
		defer r.sniffBufs.Put(buf)
		n, res := sniffConn(c, buf[:], sniffWait)
		r.sniffed(p, f, pf, res, buf[:n])
		e = early{read: buf[:n]}
	}
	d, out, err := r.open(ctx, p, f, pf, e)
	if out == nil && f.gate != nil {
		r.serveGate(ctx, p, c, e.read, f.gate.fw, f, pf, done)
		return
	}
	if out == nil {
		// Refused or failed (fail closed): never a direct fallback. A caged flow the policy
		// refused is told why (flow_refused_answer.go); every other gets a reset.
		if err == nil && answersRefusal(d) {
			r.answerRefused(c, f, d, e.read)
		} else {
			reset(c)
		}
		r.endFlow(f, done)
		return
	}
	r.relayFlow(p, f, c, out, done)
}

// setup takes the flow's set-up slots, its destination's and its source's (waiting up to
// the connect timeout for a fair turn), then looks its name up when the policy asks
// (policy.Policy.NeedsResolve: a caged flow that would leave from this machine by its
// name), through the proxy's resolver, remembered per name. done gives the slots back.
func (r *Router) setup(ctx context.Context, p *compiled, key string, pf *policy.Flow) (done func(), err error) {
	dst := dstOf(pf)
	wctx, cancel := context.WithTimeout(ctx, p.ConnectTimeout)
	defer cancel()
	if err := r.adm.dstAcquire(wctx, dst); err != nil {
		return nil, err
	}
	if err := r.adm.setups.acquire(wctx, key); err != nil {
		r.adm.dstRelease(dst, time.Time{})
		if !errors.Is(err, errBusy) {
			err = fmt.Errorf("%w (waited %v): %w", errNoSlot, p.ConnectTimeout, err)
		}
		return nil, err
	}
	since := time.Now() // the set-up's own time, for the destination's cap (dstRelease)
	if r.resolved != nil && p.Decision.NeedsResolve(pf) {
		// A time of its own: the wait for the slot must not leave the lookup none (the
		// flow would be refused as not verifiable).
		lctx, cancel := context.WithTimeout(ctx, p.ConnectTimeout)
		pf.Resolved = r.resolved.lookup(lctx, pf.Host)
		cancel()
	}
	return func() { r.adm.endSetup(key, dst, since) }, nil
}

// addresses fills in a flow's original addresses (src, dst, as the capture reports them;
// local is the accepted connection's own address, or zero when dst is not on the listener's
// port) and whether it came from a VM. A connection made to the listener itself, not
// redirected, is an error: its original destination is its own address. One that TPROXY
// handed over (nftcap.Spec.TCPTProxy) has its original destination as local address too,
// but never on the listener's port (the capture redirects that port), so callers pass zero.
func (r *Router) addresses(f *FlowRecord, pf *policy.Flow, src, dst, local netip.AddrPort) error {
	f.Src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	f.Dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if f.Dst == local || f.Dst.Addr().IsUnspecified() {
		return errors.New("connection made to the listener itself, not redirected")
	}
	*pf = policy.Flow{Network: rules.TCP, Src: f.Src.Addr(), Dst: f.Dst.Addr(), Port: f.Dst.Port()}
	if r.opts.FromVM != nil {
		pf.FromVM = r.opts.FromVM(pf.Src)
	}
	if r.opts.CagedSocket != nil {
		pf.CagedSocket = r.opts.CagedSocket(f.Src, f.Dst)
	}
	return nil
}

// classify finds the rest of what the policy decides on, once the addresses are known: the
// flow's owner when the policy needs it, and the name behind its destination (what the name
// resolves to is looked up later, in a set-up slot). A fake IP's name is held until release
// is called (nil when nothing is held).
func (r *Router) classify(c *net.TCPConn, f *FlowRecord, pf *policy.Flow, p *compiled) (release func()) {
	if r.opts.Owner != nil && p.Decision.NeedsOwner(pf) {
		if info, err := r.opts.Owner(c, f.Src, f.Dst); err == nil {
			pf.Learn(info)
			f.Owner = pf.Owner
		} else {
			r.log.Debug("owner lookup", "src", f.Src, "dst", f.Dst, "err", err)
		}
	}
	release = r.names(pf)
	f.Host = pf.Host
	if f.Host != "" {
		f.NameFrom = "dns"
	}
	return release
}

// dial connects the decided flow f: direct or through its upstream (the first healthy
// member of a failover list). A proxied flow takes the client's first bytes along (e): the
// upstream sends them with the request when it pipelines, right after its answer otherwise. A
// direct one delivers the bytes a listener already read, and leaves those still in the
// client's socket to the relay. A direct verdict by name (policy.Decision.ByName: a
// destination known by its name only, a fake IP, or a name from the first bytes that won
// the verdict) dials the name resolved through the proxy, never the address the client
// chose unless the name resolves there (setup resolved it already: pf.Resolved, the
// addresses the policy checked).
func (r *Router) dial(ctx context.Context, p *compiled, f *FlowRecord, d policy.Decision, pf *policy.Flow, e early) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, p.ConnectTimeout)
	defer cancel()
	if d.Action == rules.Direct {
		byName := d.ByName // no address, a fake IP, or a name from the first bytes (policy: byname.go)
		if byName || p.Decision.Listener(f.Dst) {
			// Perhaps one of the router's own listeners: it waits for the entry put below.
			r.carried.begin()
			defer r.carried.end()
		}
		out, err := r.dialDirect(dctx, f.Dst, f.Host, byName, pf.Resolved)
		if err != nil {
			return nil, err
		}
		if byName {
			f.Dialed = netaddr.AddrPort(out.RemoteAddr())
		}
		if p.Decision.Listener(netaddr.AddrPort(out.RemoteAddr())) {
			// One of the router's own listeners: it judges the flow's client, not this host.
			r.carried.put(netaddr.AddrPort(out.LocalAddr()), identityOf(pf))
		}
		if len(e.read) == 0 {
			return out, nil
		}
		if dl, ok := dctx.Deadline(); ok {
			out.SetWriteDeadline(dl)
		}
		n, err := out.Write(e.read)
		out.SetWriteDeadline(time.Time{})
		f.Up = int64(n)
		f.bytes.up.Store(f.Up)
		if err != nil {
			out.Close()
			return nil, fmt.Errorf("connect direct: send the first bytes: %w", err)
		}
		return out, nil
	}
	sd := upstream.Addr{IP: f.Dst.Addr(), Port: f.Dst.Port()}
	if f.Host != "" {
		sd = upstream.Addr{Name: f.Host, Port: f.Dst.Port()}
	}
	up, err := p.upstream(d.Proxy)
	if err != nil {
		return nil, err
	}
	first := e.read
	if e.sock != nil {
		buf := r.early.Get().(*[earlyMax]byte)
		defer r.early.Put(buf)
		first = buf[:pending(e.sock, buf[:])]
	}
	f.Up = int64(len(first))
	f.bytes.up.Store(f.Up)
	if g, ok := up.(*upstream.Group); ok {
		out, via, err := g.ConnectVia(dctx, sd, first)
		f.Via = via
		return out, err
	}
	f.Via = d.Proxy
	return up.Connect(dctx, sd, first)
}

// dialDirect connects to dst with the router's own dialer. With byName, host is first
// resolved through the proxy (a name never goes to the local resolver); when setup resolved
// it already (resolved), those addresses, which the policy checked, are the ones dialed:
// dst's address is then tried first when it is one of them (policy.DirectOrder), never
// otherwise.
func (r *Router) dialDirect(ctx context.Context, dst netip.AddrPort, host string, byName bool, resolved []netip.Addr) (*net.TCPConn, error) {
	targets := []netip.Addr{dst.Addr()}
	switch {
	case byName && len(resolved) > 0:
		targets = policy.DirectOrder(dst.Addr(), resolved)
	case byName:
		if r.opts.Names == nil {
			return nil, fmt.Errorf("resolve %s via proxy: no DNS side to ask", host)
		}
		addrs, err := r.opts.Names.ResolveViaProxy(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s via proxy: %w", host, err)
		}
		targets = policy.DirectOrder(dst.Addr(), addrs)
	}
	var err error
	for _, a := range targets {
		var c *net.TCPConn
		c, err = r.opts.DialTCP(ctx, netip.AddrPortFrom(a, dst.Port()))
		if err == nil {
			return c, nil
		}
	}
	if err == nil {
		err = errors.New("no address")
	}
	return nil, fmt.Errorf("connect direct: %w", err)
}

// reset closes c with an RST, so the client learns at once that the flow is refused.
func reset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}
