package router

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/router/modelfwd"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
)

// Forward is one [[forward]] (modelfwd.Forward): the router accepts its connections,
// admits them and relays a raw one; package modelfwd serves an HTTP one.
type Forward = modelfwd.Forward

// ListenForward opens the forward's listening socket (on its address only).
func (r *Router) ListenForward(ctx context.Context, f Forward) (*net.TCPListener, error) {
	lc := net.ListenConfig{Control: r.opts.Control}
	ln, err := lc.Listen(ctx, "tcp", f.Listen.String())
	if err != nil {
		return nil, fmt.Errorf("forward %s: listen %s: %w", f.Name, f.Listen, err)
	}
	return ln.(*net.TCPListener), nil
}

// ServeForward accepts on ln until ctx is done or ln is closed; each connection is served
// with the settings current(), read when it is accepted, so a reload swaps a forward's allow
// list, target or name without closing its socket. current must be safe for concurrent use
// and never return nil. Bytes pass without buffering (kernel splice, no Nagle delay added by
// the router), so the events of a streamed completion reach the guest as the model sends
// them.
func (r *Router) ServeForward(ctx context.Context, ln *net.TCPListener, current func() *Forward) error {
	return r.acceptLoop(ctx, ln, "forward "+current().Name+": accept", func(c *net.TCPConn) {
		f := current()
		src := netaddr.AddrPort(c.RemoteAddr()).Addr()
		// The guest of a carried connection (the router's own, from this machine) is its
		// local address's: the flow it carries holds its guest's shares already.
		guest := inboundGuest(src, r.pol.Load().Decision.VMNetworks(), f.Allow)
		name := f.Name
		if !r.adm.forwardTake(name, guest) {
			// The forwards' budget of descriptors is their own: a guest flooding one cannot
			// take the transparent flows' nor the DNS server's, nor another guest's forward.
			r.book.Add(refusal.Limit, refusal.Event{Src: netaddr.AddrPort(c.RemoteAddr()), Dst: f.Connect, Rule: "forward " + f.Name})
			reset(c)
			if r.refuse.note("forward "+f.Name+": over its budget", src.String()) {
				r.log.Warn("forward refused: its guest holds its share of the forward's flows", "forward", f.Name, "src", src, "guest", guest)
			}
			return
		}
		r.flows.Add(1)
		go func() {
			defer r.flows.Done()
			defer r.adm.forwardGive(name, guest)
			r.forward(ctx, c, *f)
		}()
	})
}

func (r *Router) forward(ctx context.Context, c *net.TCPConn, fw Forward) {
	f := &FlowRecord{ID: r.nextID.Add(1), Start: time.Now(), Src: netaddr.AddrPort(c.RemoteAddr()), Dst: fw.Connect, index: -1,
		Verdict: rules.Verdict{Name: "forward " + fw.Name, Action: rules.Direct}}
	r.count.flows.Add(1)
	log := r.log.With("forward", fw.Name, "src", f.Src, "connect", fw.Connect)
	client := f.Src.Addr()
	if r.pol.Load().Decision.Local(client) {
		// The router's own connection carrying a flow (an inbound's client asked for the
		// forward's address) is judged by that flow's client.
		if id, ok := r.carried.take(f.Src); ok {
			client = id.src
			f.Src = netip.AddrPortFrom(client, f.Src.Port())
			log = log.With("client", client)
		}
	}
	if !fw.Allowed(client) {
		r.refused(refusal.ForwardSource, f) // counted before the client sees the reset
		reset(c)
		if r.refuse.note("forward "+fw.Name+": source not allowed", f.Src.Addr().String()) {
			log.Warn("forward refused: source not allowed")
		}
		return
	}
	if fw.API != nil {
		r.forwardHTTP(ctx, c, nil, "", fw, f, log)
		return
	}
	p := r.pol.Load()
	dctx, cancel := context.WithTimeout(ctx, p.ConnectTimeout)
	out, err := r.dialer.DialContext(dctx, "tcp", fw.Connect.String())
	cancel()
	if err != nil {
		reset(c)
		if r.refuse.note("forward "+fw.Name+": connect failed", f.Src.Addr().String()) {
			log.Warn("forward failed", "err", err)
		}
		return
	}
	r.live.add(f)
	rl := r.relayFor(p)
	rl.idle = cmp.Or(fw.IdleTimeout, rl.idle)
	up, down, err := rl.run(c, out.(*net.TCPConn), &f.bytes)
	f.Up, f.Down = up, down
	r.finish(f)
	if errors.Is(err, errIdle) {
		err = nil
	}
	attrs := []any{"up", up, "down", down, "duration", time.Since(f.Start).Round(time.Millisecond)}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	log.Info("forward", attrs...)
}

// forwardHTTP serves one connection of an HTTP forward (modelfwd.Server.Serve) as the
// flow f, shown by status while it lasts; first are bytes of the guest's already read (a
// gated flow's, forward_gate.go), read before c's; self is the address the guest connected to
// ("": c's own).
func (r *Router) forwardHTTP(ctx context.Context, c *net.TCPConn, first []byte, self string, fw Forward, f *FlowRecord, log *slog.Logger) {
	p := r.pol.Load()
	r.live.add(f)
	requests, refused := r.model.Serve(ctx, &fw, modelfwd.Conn{C: c, First: first, Self: self, Src: f.Src,
		Up: &f.bytes.up, Down: &f.bytes.down, Idle: cmp.Or(fw.IdleTimeout, p.IdleTimeout), Log: log})
	f.Up, f.Down = f.bytes.load()
	r.finish(f)
	log.Info("forward", "up", f.Up, "down", f.Down, "requests", requests, "refused", refused,
		"duration", time.Since(f.Start).Round(time.Millisecond))
}
