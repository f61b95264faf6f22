package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/policy"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/socks5"
)

// Serve accepts redirected connections on ln until ctx is done or ln is closed; each flow is
// set up (decided, connected) on a goroutine of its own, then relayed by the engine. What
// flows may hold is budgeted by source (see admission): a flow over the descriptor budget
// is refused at accept, and set-up slots are shared fairly, so a guest flooding the
// listener cannot hold back another's flows. Accept errors (out of descriptors) pause
// accepting and never end it. Closing ln (or cancelling ctx) stops accepting; flows already
// running go on (Wait waits for them).
func (r *Router) Serve(ctx context.Context, ln *net.TCPListener) error {
	return r.acceptLoop(ctx, ln, "accept", func(c *net.TCPConn) {
		if !r.adm.enter() {
			r.refuseAtAccept(c, errOverBudget)
			return
		}
		r.flows.Add(1)
		go r.handle(ctx, c) // leaves the budget and marks r.flows done when the flow ends
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
	if r.refuse.note(why.Error(), src.Addr().String()) {
		r.log.Warn("flow refused", "src", src, "err", why.Error())
	}
}

// Accept errors other than a closed listener pause accepting from acceptMinPause, doubling
// up to acceptMaxPause: out of descriptors, a listener must wait for some to free, and it
// must never end (the forwards and the control channel would be gone for good).
const (
	acceptMinPause = 5 * time.Millisecond
	acceptMaxPause = time.Second
)

// acceptLoop accepts on ln until ctx is done or ln is closed (then it returns nil) and
// gives each connection to serve. Other accept errors pause it (see acceptMinPause) and
// are counted in the refusal summary, named with what; it never returns them.
func (r *Router) acceptLoop(ctx context.Context, ln *net.TCPListener, what string, serve func(*net.TCPConn)) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var pause time.Duration
	for {
		c, err := ln.AcceptTCP()
		if err == nil {
			pause = 0
			serve(c)
			continue
		}
		if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
			return nil
		}
		pause = min(max(2*pause, acceptMinPause), acceptMaxPause)
		if r.refuse.note(what+" failed", ln.Addr().String()) {
			r.log.Warn(what+" failed; pausing", "err", err, "pause", pause)
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil
		}
	}
}

// earlyMax bounds the client bytes sent along with the SOCKS request (see dialProxy).
const earlyMax = 4 << 10

// Flow is what the router knows of one connection; it is logged when the flow ends.
type Flow struct {
	ID      uint64
	Src     netip.AddrPort
	Dst     netip.AddrPort // the original destination
	Host    string         // the destination's name, when known
	App     string
	PID     int
	Verdict rules.Verdict
	Step    policy.Step // what decided: a rule, or an implicit step
	Up      int64       // bytes client → destination
	Down    int64
	Start   time.Time
	Err     error

	relayed bool // the flow reached the relay; set before the relay starts
}

// handle sets up one flow: classify (where it came from and was going, who owns it, the
// name behind its address), decide (the one policy), dial (direct or through the upstream),
// then it hands both connections to the relay and returns: the relay logs the flow and
// marks it done (r.flows) when it ends. A flow refused or failed before the relay is logged
// and marked done here.
//
// Admission (see admission): the flow entered the descriptor budget at accept; once its
// source is known (classify) it takes its share of that budget, then, unless the policy
// refuses it outright, one of its destination's set-up slots and one of its source's
// (waiting for a fair turn, up to the connect timeout). Both set-up slots are given back
// when the flow is relayed or fails; its budget when it ends.
func (r *Router) handle(ctx context.Context, c *net.TCPConn) {
	p := r.pol.Load()
	f := &Flow{ID: r.nextID.Add(1), Start: time.Now(), Src: netaddr.AddrPort(c.RemoteAddr())}
	relayed := false
	var release func()  // the fake-IP name's hold
	var unshare func()  // the source's share of the budget
	var endSetup func() // the set-up slots
	defer func() {
		if endSetup != nil {
			endSetup()
		}
		if !relayed {
			r.live.remove(f.ID)
			if release != nil {
				release()
			}
			if unshare != nil {
				unshare()
			}
			r.adm.leave()
			r.logFlow(f)
			r.flows.Done()
		}
	}()
	pf, release, err := r.classify(c, f, p)
	if err != nil {
		f.Err = err
		reset(c)
		return
	}
	key := sourceKey(&pf, p)
	if !r.adm.flows.tryAcquire(key) {
		f.Err, f.Verdict = errOverShare, admissionVerdict
		reset(c)
		return
	}
	unshare = func() { r.adm.flows.release(key) }
	d := p.Decision.Decide(&pf)
	if d.Action != rules.Block && d.Step != policy.StepDNS {
		if endSetup, err = r.setup(ctx, p, key, &pf); err != nil {
			f.Err, f.Verdict = err, admissionVerdict
			reset(c)
			return
		}
		if pf.Resolved != nil {
			d = p.Decision.Decide(&pf) // with what the name resolves to
		}
	}
	f.Verdict, f.Step = d.Verdict, d.Step
	p.count(d)
	r.live.add(f) // removed when the flow ends: by the relay's callback, or the defer above
	if d.Action == rules.Block || d.Step == policy.StepDNS {
		// A DNS flow reaching the listener is a capture fault: it belongs to the DNS
		// server, and is refused here rather than sent anywhere.
		reset(c)
		return
	}
	out, err := r.dial(ctx, p, f, c, d, &pf)
	if err != nil {
		f.Err = err
		reset(c) // fail closed: the client sees a reset, never a direct fallback
		return
	}
	endSetup()
	endSetup = nil
	rl := r.relayFor(p)
	relayed, f.relayed = true, true
	rl.start(c, out, func(res result) {
		// On the relay's goroutine: nothing here may block.
		r.live.remove(f.ID)
		f.Up, f.Down, f.Err = f.Up+res.up, res.down, res.err
		if release != nil {
			release()
		}
		unshare()
		r.adm.leave()
		if !r.log.Enabled(context.Background(), flowLevel(f)) {
			r.flows.Done()
			return
		}
		go func() {
			r.logFlow(f) // a slow log writer must not stall the relay
			r.flows.Done()
		}()
	})
}

// sourceKey names the source a flow is budgeted under: a VM's address, the app of a local
// flow when its owner is known, else the local address.
func sourceKey(pf *policy.Flow, p *compiled) string {
	switch {
	case pf.FromVM || p.Decision.FromVMNetwork(pf.Src):
		return "vm " + pf.Src.String()
	case pf.AppPath != "":
		return "app " + pf.AppPath
	case pf.App != "":
		return "app " + pf.App
	}
	return "host " + pf.Src.String()
}

// setup takes the flow's set-up slots, its destination's and its source's (waiting up to
// the connect timeout for a fair turn), then looks its name up when the policy asks
// (policy.Policy.NeedsResolve: a caged flow that would leave from this machine by its
// name), through the proxy's resolver, remembered per name. done gives the slots back.
func (r *Router) setup(ctx context.Context, p *compiled, key string, pf *policy.Flow) (done func(), err error) {
	dst := pf.Host
	if dst == "" {
		dst = pf.Dst.String()
	}
	if !r.adm.dstAcquire(dst) {
		return nil, errDstBusy
	}
	wctx, cancel := context.WithTimeout(ctx, p.ConnectTimeout)
	defer cancel()
	if err := r.adm.setups.acquire(wctx, key); err != nil {
		r.adm.dstRelease(dst)
		if !errors.Is(err, errBusy) {
			err = fmt.Errorf("%w (waited %v): %w", errNoSlot, p.ConnectTimeout, err)
		}
		return nil, err
	}
	if r.names != nil && p.Decision.NeedsResolve(pf) {
		// A time of its own: the wait for the slot must not leave the lookup none (the
		// flow would be refused as not verifiable).
		lctx, cancel := context.WithTimeout(ctx, p.ConnectTimeout)
		pf.Resolved = r.names.lookup(lctx, pf.Host)
		cancel()
	}
	return func() {
		r.adm.setups.release(key)
		r.adm.dstRelease(dst)
	}, nil
}

// classify finds what the policy decides on: the flow's original addresses, whether it
// came from a VM, its owner when the policy needs it, and the name behind its destination
// (what the name resolves to is looked up later, in a set-up slot). A fake IP's name is
// held until release is called (nil when nothing is held).
func (r *Router) classify(c *net.TCPConn, f *Flow, p *compiled) (pf policy.Flow, release func(), err error) {
	src, dst, err := r.opts.Original(c)
	if err != nil {
		return pf, nil, fmt.Errorf("original destination: %w", err)
	}
	f.Src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	f.Dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if f.Dst == netaddr.AddrPort(c.LocalAddr()) || f.Dst.Addr().IsUnspecified() {
		return pf, nil, errors.New("connection made to the listener itself, not redirected")
	}
	pf = policy.Flow{Network: rules.TCP, Src: f.Src.Addr(), Dst: f.Dst.Addr(), Port: f.Dst.Port()}
	if r.opts.FromVM != nil {
		pf.FromVM = r.opts.FromVM(pf.Src)
	}
	if r.opts.Owner != nil && p.Decision.NeedsOwner(&pf) {
		if info, err := r.opts.Owner(c, f.Src, f.Dst); err == nil {
			pf.App, pf.AppPath, pf.Services, f.App, f.PID = info.Name, info.Path, info.Services, info.Name, info.PID
		} else {
			r.log.Debug("owner lookup", "src", f.Src, "dst", f.Dst, "err", err)
		}
	}
	if n := r.opts.Names; n != nil {
		if n.InPool(pf.Dst) {
			// Without a name the policy refuses the flow (StepNoName).
			if name, rel, ok := n.Acquire(pf.Dst); ok {
				pf.Host, release = name, rel
			}
		} else if name, ok := n.NameFor(pf.Dst); ok {
			pf.Host = name
		}
	}
	f.Host = pf.Host
	return pf, release, nil
}

// dial connects the decided flow f: direct or through its upstream. A proxied flow takes
// the client's first bytes along with the request when the upstream pipelines.
func (r *Router) dial(ctx context.Context, p *compiled, f *Flow, c *net.TCPConn, d policy.Decision, pf *policy.Flow) (*net.TCPConn, error) {
	dctx, cancel := context.WithTimeout(ctx, p.ConnectTimeout)
	defer cancel()
	if d.Action == rules.Direct {
		return r.dialDirect(dctx, f.Dst, f.Host, p.Decision.InPool(pf.Dst), pf.Resolved)
	}
	sd := socks5.Addr{IP: f.Dst.Addr(), Port: f.Dst.Port()}
	if f.Host != "" {
		sd = socks5.Addr{Name: f.Host, Port: f.Dst.Port()}
	}
	up := p.ups[d.Proxy]
	var early []byte
	if up.Pipeline {
		// What the client already sent rides with the request.
		buf := r.early.Get().(*[earlyMax]byte)
		defer r.early.Put(buf)
		early = buf[:pending(c, buf[:])]
		f.Up = int64(len(early))
	}
	return r.dialProxy(dctx, up, sd, early)
}

// dialDirect connects to dst with the router's own dialer. A fake IP is first resolved
// through the proxy (the name never goes to the local resolver); when classify resolved it
// already (resolved), those addresses, which the policy checked, are the ones dialed.
func (r *Router) dialDirect(ctx context.Context, dst netip.AddrPort, host string, fake bool, resolved []netip.Addr) (*net.TCPConn, error) {
	targets := []netip.Addr{dst.Addr()}
	switch {
	case fake && len(resolved) > 0:
		targets = resolved
	case fake:
		addrs, err := r.opts.Names.ResolveViaProxy(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s via proxy: %w", host, err)
		}
		targets = addrs
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

// flowLevel is the level of f's record: warn for a flow that failed, info otherwise.
func flowLevel(f *Flow) slog.Level {
	if f.Err != nil && !errors.Is(f.Err, errIdle) {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// refusal names why f was refused or failed before the relay, for the summary of refusals;
// "" for a flow that was relayed (its end is logged one by one).
func refusal(f *Flow) string {
	switch {
	case f.relayed:
		return ""
	case f.Err == nil && f.Verdict.Action == rules.Block:
		return "refused by " + f.Verdict.Name
	case f.Err == nil:
		return ""
	}
	for _, e := range []error{errOverShare, errOverBudget, errDstBusy, errBusy, errNoSlot} {
		if errors.Is(f.Err, e) {
			return e.Error()
		}
	}
	return "failed before the relay"
}

// logFlow logs f when it ends. Refused and failed flows go through the refusal summary:
// only the first few of each reason in an interval are logged one by one.
func (r *Router) logFlow(f *Flow) {
	if reason := refusal(f); reason != "" && !r.refuse.note(reason, f.Src.Addr().String()) {
		return
	}
	if !r.log.Enabled(context.Background(), flowLevel(f)) {
		return // the record's attributes cost more than the rest of a short flow's end
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
	if f.Verdict.Proxy != "" {
		attrs = append(attrs, "proxy", f.Verdict.Proxy)
	}
	if f.Err != nil && !errors.Is(f.Err, errIdle) {
		attrs = append(attrs, "err", f.Err.Error())
		r.log.Warn("flow", attrs...)
		return
	}
	if errors.Is(f.Err, errIdle) {
		attrs = append(attrs, "end", "idle")
	}
	r.log.Info("flow", attrs...)
}
