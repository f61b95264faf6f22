package daemon

import (
	"context"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router"
)

// The inbounds ([[inbound]]) live like the forwards: a socket and a serving goroutine each,
// opened at start, kept by a reload that keeps their listen address (their settings are
// swapped in for the connections accepted afterwards), opened by a reload that adds them
// before anything of the new config takes effect, closed by a reload that drops them once
// it has. Closing one stops its accepting; the tunnels it opened go on.

// inboundOf is the router's inbound of in.
func inboundOf(in conf.Inbound) router.Inbound {
	return router.Inbound{Name: in.Name, Type: router.InboundType(in.Type), Listen: in.Listen, Allow: in.Allow}
}

// startInbounds opens and serves cfg's inbounds (at start).
func (d *daemon) startInbounds(ctx context.Context, cfg *conf.Config) error {
	for _, in := range cfg.Inbounds {
		ir, err := openServed(ctx, inboundOf(in), d.r.ListenInbound)
		if err != nil {
			return err
		}
		d.runInbound(ir)
	}
	return nil
}

// inboundReload is a reload's part for the inbounds: the settings wanted, by listen address,
// and the sockets opened for the addresses that are new.
type inboundReload struct {
	want   map[string]router.Inbound
	opened []*inboundRun
}

// prepareInbounds opens the sockets of cfg's inbounds on new addresses; nothing running
// changes. On error what it opened is closed.
func (d *daemon) prepareInbounds(ctx context.Context, cfg *conf.Config) (*inboundReload, error) {
	ir := &inboundReload{want: map[string]router.Inbound{}}
	for _, in := range cfg.Inbounds {
		ri := inboundOf(in)
		ir.want[ri.Listen.String()] = ri
		if _, ok := d.inbounds[ri.Listen.String()]; ok {
			continue // kept; its settings are swapped by commit
		}
		run, err := openServed(ctx, ri, d.r.ListenInbound)
		if err != nil {
			ir.abort()
			return nil, err
		}
		ir.opened = append(ir.opened, run)
	}
	return ir, nil
}

// abort closes the sockets prepareInbounds opened.
func (ir *inboundReload) abort() {
	for _, o := range ir.opened {
		o.ln.Close()
	}
}

// commitInbounds applies a prepared reload: kept inbounds take their new settings, dropped
// ones close, new ones start serving. It cannot fail.
func (d *daemon) commitInbounds(ir *inboundReload) {
	for addr, run := range d.inbounds {
		if ni, keep := ir.want[addr]; keep {
			run.cfg.Store(&ni)
			d.r.EndInboundClients(&ni) // clients its allow list no longer names
			continue
		}
		run.stop()
		delete(d.inbounds, addr)
	}
	for _, run := range ir.opened {
		d.runInbound(run)
	}
}

// stopInbounds stops every inbound's accepting and the requests being read.
func (d *daemon) stopInbounds() {
	for _, run := range d.inbounds {
		run.stop()
	}
}

// runInbound serves run until stop or a reload that drops it.
func (d *daemon) runInbound(run *inboundRun) {
	if d.inbounds == nil {
		d.inbounds = map[string]*inboundRun{}
	}
	d.inbounds[run.cfg.Load().Listen.String()] = run
	run.run(d, d.r.ServeInbound, "inbound", func(in *router.Inbound) string { return in.Name })
}
