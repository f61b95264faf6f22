package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/policy"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/socks5"
)

// Serve accepts redirected connections on ln until ctx is done or ln fails; each flow is
// set up (decided, connected) on a goroutine of its own, then relayed by the engine. At most
// maxSetups flows are set up at once: a burst waits in the listen backlog instead of growing
// goroutine stacks and garbage. Closing ln (or cancelling ctx) stops accepting; flows already
// running go on (Wait waits for them).
func (r *Router) Serve(ctx context.Context, ln *net.TCPListener) error {
	return r.acceptLoop(ctx, ln, "accept", r.setups, func(c *net.TCPConn) {
		r.flows.Add(1)
		go func() {
			r.handle(ctx, c) // marks r.flows done when the flow ends
			<-r.setups
		}()
	})
}

// acceptLoop accepts on ln until ctx is done or ln is closed (then it returns nil) and
// gives each connection to serve. With tokens, one token is taken before each accept (serve's
// goroutine returns it). Running out of descriptors or memory pauses accepting briefly
// instead of ending the loop; other accept errors end it, named with what.
func (r *Router) acceptLoop(ctx context.Context, ln *net.TCPListener, what string, tokens chan struct{}, serve func(*net.TCPConn)) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		if tokens != nil {
			select {
			case tokens <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
		}
		c, err := ln.AcceptTCP()
		if err == nil {
			serve(c)
			continue
		}
		if tokens != nil {
			<-tokens
		}
		var ne net.Error
		switch {
		case ctx.Err() != nil || errors.Is(err, net.ErrClosed):
			return nil
		case errors.As(err, &ne) && ne.Timeout():
		case errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM):
			r.log.Warn(what+": out of resources, pausing", "err", err)
			time.Sleep(50 * time.Millisecond)
		default:
			return fmt.Errorf("%s: %w", what, err)
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
}

// handle sets up one flow: classify (where it came from and was going, who owns it, the
// name behind its address), decide (the one policy), dial (direct or through the upstream),
// then it hands both connections to the relay and returns: the relay logs the flow and
// marks it done (r.flows) when it ends. A flow refused or failed before the relay is logged
// and marked done here.
func (r *Router) handle(ctx context.Context, c *net.TCPConn) {
	p := r.pol.Load()
	f := &Flow{ID: r.nextID.Add(1), Start: time.Now(), Src: netaddr.AddrPort(c.RemoteAddr())}
	relayed := false
	var release func()
	defer func() {
		if !relayed {
			r.live.remove(f.ID)
			if release != nil {
				release()
			}
			r.logFlow(f)
			r.flows.Done()
		}
	}()
	pf, release, err := r.classify(ctx, c, f, p)
	if err != nil {
		f.Err = err
		reset(c)
		return
	}
	d := p.Decision.Decide(&pf)
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
	rl := r.relayFor(p)
	relayed = true
	rl.start(c, out, func(res result) {
		// On the relay's goroutine: nothing here may block.
		r.live.remove(f.ID)
		f.Up, f.Down, f.Err = f.Up+res.up, res.down, res.err
		if release != nil {
			release()
		}
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

// classify finds what the policy decides on: the flow's original addresses, whether it
// came from a VM, its owner when the policy needs it, the name behind its destination, and
// what that name resolves to when the policy asks (policy.Policy.NeedsResolve: a caged flow
// that would leave from this machine by its name), looked up through the proxy's resolver
// and remembered per name. A fake IP's name is held until release is called (nil when
// nothing is held).
func (r *Router) classify(ctx context.Context, c *net.TCPConn, f *Flow, p *compiled) (pf policy.Flow, release func(), err error) {
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
	if r.names != nil && p.Decision.NeedsResolve(&pf) {
		rctx, cancel := context.WithTimeout(ctx, p.ConnectTimeout)
		pf.Resolved = r.names.lookup(rctx, pf.Host)
		cancel()
	}
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

func (r *Router) logFlow(f *Flow) {
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
