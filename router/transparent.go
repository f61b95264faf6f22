package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/policy"
	"github.com/agentcage/router/refusal"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/upstream"
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
	Dst     netip.AddrPort // the original destination; its address is invalid when only Host is known
	Host    string         // the destination's name, when known
	Inbound string         // the inbound that took the flow; "" for a captured one
	App     string
	PID     int
	Service string // the Windows services of the owning svchost, when known (joined ",")
	Verdict rules.Verdict
	Step    policy.Step // what decided: a rule, or an implicit step
	Via     string      // the proxy that carried it (a failover list's member)
	Up      int64       // bytes client → destination
	Down    int64
	Start   time.Time
	Err     error

	bytes meter     // live, as the relay moves them
	rate  sample    // guarded by Router.live.mu
	pol   *compiled // the policy that decided it (nil: a forward, or not decided)
	index int       // the rule that decided it, -1 for an implicit step
}

// handle sets up one redirected flow: classify (where it came from and was going, who owns
// it, the name behind its address), then the steps every listener shares (flow.go): decide,
// dial, and the relay, which logs the flow and marks it done (r.flows) when it ends. A flow
// refused or failed before the relay gets a reset and is logged and marked done here.
func (r *Router) handle(ctx context.Context, c *net.TCPConn) {
	p := r.pol.Load()
	f := r.newFlow(netaddr.AddrPort(c.RemoteAddr()))
	pf, release, err := r.classify(c, f, p)
	if err != nil {
		f.Err = err
		r.refused(refusal.Capture, f)
		reset(c)
		r.endFlow(f, nil)
		return
	}
	_, out, _ := r.open(ctx, p, f, &pf, early{sock: c})
	if out == nil {
		reset(c) // refused or failed (fail closed): a reset, never a direct fallback
		r.endFlow(f, release)
		return
	}
	r.relayFlow(p, f, c, out, release)
}

// classify finds what the policy decides on: the flow's original addresses, whether it
// came from a VM, its owner when the policy needs it, and the name behind its destination.
// A fake IP's name is held until release is called (nil when nothing is held).
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
			f.Service = strings.Join(info.Services, ",")
		} else {
			r.log.Debug("owner lookup", "src", f.Src, "dst", f.Dst, "err", err)
		}
	}
	release = r.names(&pf)
	f.Host = pf.Host
	return pf, release, nil
}

// dial connects the decided flow f: direct or through its upstream (the first healthy
// member of a failover list). A proxied flow takes the client's first bytes along (e): the
// upstream sends them with the request when it pipelines, right after its answer otherwise. A
// direct one delivers the bytes a listener already read, and leaves those still in the
// client's socket to the relay. A destination known by its name only (an inbound's client
// asked for a name) or by a fake IP is resolved through the proxy when it goes direct.
func (r *Router) dial(ctx context.Context, p *compiled, f *Flow, d policy.Decision, e early) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, p.ConnectTimeout)
	defer cancel()
	if d.Action == rules.Direct {
		byName := !f.Dst.Addr().IsValid() || p.Decision.InPool(f.Dst.Addr())
		out, err := r.dialDirect(dctx, f.Dst, f.Host, byName)
		if err != nil {
			return nil, err
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

// dialDirect connects to dst with the router's own dialer. With byName, dst's address is a
// fake IP or none at all: host is first resolved through the proxy (a name never goes to the
// local resolver).
func (r *Router) dialDirect(ctx context.Context, dst netip.AddrPort, host string, byName bool) (*net.TCPConn, error) {
	targets := []netip.Addr{dst.Addr()}
	if byName {
		if r.opts.Names == nil {
			return nil, fmt.Errorf("resolve %s via proxy: no DNS side to ask", host)
		}
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

// dst is f's destination for logs and status: the address and port, or the name and port
// when only the name is known.
func (f *Flow) dst() string {
	if !f.Dst.Addr().IsValid() {
		return net.JoinHostPort(f.Host, strconv.Itoa(int(f.Dst.Port())))
	}
	return f.Dst.String()
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

// flowAttrs are the attributes of f's log records.
func flowAttrs(f *Flow, ended bool) []any {
	attrs := make([]any, 0, 24)
	attrs = append(attrs, "id", f.ID, "src", f.Src, "dst", f.dst(),
		"rule", f.Verdict.Name, "action", f.Verdict.Action.String())
	if ended {
		attrs = append(attrs, "up", f.Up, "down", f.Down, "duration", time.Since(f.Start).Round(time.Millisecond))
	}
	if f.Host != "" {
		attrs = append(attrs, "host", f.Host)
	}
	if f.App != "" {
		attrs = append(attrs, "app", f.App, "pid", f.PID)
	}
	if f.Service != "" {
		attrs = append(attrs, "services", f.Service)
	}
	if f.Inbound != "" {
		attrs = append(attrs, "inbound", f.Inbound)
	}
	if f.Via != "" {
		attrs = append(attrs, "proxy", f.Via)
	} else if f.Verdict.Proxy != "" {
		attrs = append(attrs, "proxy", f.Verdict.Proxy)
	}
	return attrs
}

// logOpen records a flow that was decided and connected, as its relay starts ("flow open");
// the record of its end ("flow") follows with the bytes.
func (r *Router) logOpen(f *Flow) {
	if r.log.Enabled(context.Background(), slog.LevelInfo) {
		r.log.Info("flow open", flowAttrs(f, false)...)
	}
}

// logFlow records a flow's end: its decision, bytes each way, duration and error.
func (r *Router) logFlow(f *Flow) {
	if !r.log.Enabled(context.Background(), flowLevel(f)) {
		return // the record's attributes cost more than the rest of a short flow's end
	}
	attrs := flowAttrs(f, true)
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
