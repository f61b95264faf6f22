package daemon

import (
	"context"
	"net/netip"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/rules"
)

// ownerUDP is the platform's UDP owner lookup, or nil.
func ownerUDP(p capture.Platform) func(src, dst netip.AddrPort) (rules.Owner, error) {
	if up, ok := p.(capture.UDPSockets); ok {
		return up.OwnerUDP()
	}
	return nil
}

// startUDP connects the platform's UDP capture to the router: sockets served by
// Router.ServeUDP until ctx is done, or the router handed to the capture. A platform with
// neither captures no UDP (refused as before).
func (d *daemon) startUDP(ctx context.Context, cfg *conf.Config) error {
	switch p := d.opts.Platform.(type) {
	case capture.UDPSockets:
		readers, ret, closers, err := p.ListenUDP(cfg)
		d.closers = append(d.closers, closers...)
		if err != nil {
			return err
		}
		for _, rd := range readers {
			d.serving.Go(func() {
				if err := d.r.ServeUDP(ctx, rd, ret); err != nil {
					d.log.Error("udp", "err", err)
				}
			})
		}
	case capture.UDPRelay:
		p.UseRouter(udpRouter{d.r})
	}
	return nil
}

// udpRouter is the router as a UDPRelay capture sees it (capture.UDPRouter): its datagrams
// are the router's.
type udpRouter struct{ r *router.Router }

func (u udpRouter) HandleUDP(dg capture.Datagram, ret capture.UDPReturn) {
	u.r.HandleUDP(router.Datagram(dg), ret)
}

func (u udpRouter) Audit() *auditlog.Log { return u.r.Audit() }
