package daemon

import (
	"context"
	"io"
	"net/netip"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/proc"
)

// udpSocketPlatform is a Platform whose capture hands UDP to sockets of the router's own
// (Linux: TPROXY to the transparent sockets on [capture] udp_port).
type udpSocketPlatform interface {
	// ListenUDP opens the capture's UDP sockets for cfg: one reader per socket, the return
	// path of answers, and what to close at a stop (readers and return path included).
	ListenUDP(cfg *conf.Config) ([]router.UDPReader, router.UDPReturn, []io.Closer, error)
	// OwnerUDP finds the process of a local UDP flow (nil when the platform cannot).
	OwnerUDP() func(src, dst netip.AddrPort) (proc.Info, error)
}

// udpRelayPlatform is a Platform whose capture hands UDP to the router itself (Windows:
// the redirect engine, through router.HandleUDP).
type udpRelayPlatform interface {
	// UseRouter gives the capture the router that carries its proxied UDP; it is called
	// before the first Install.
	UseRouter(r *router.Router)
}

// ownerUDP is the platform's UDP owner lookup, or nil.
func ownerUDP(p Platform) func(src, dst netip.AddrPort) (proc.Info, error) {
	if up, ok := p.(udpSocketPlatform); ok {
		return up.OwnerUDP()
	}
	return nil
}

// startUDP connects the platform's UDP capture to the router: sockets served by
// Router.ServeUDP until ctx is done, or the router handed to the capture. A platform with
// neither captures no UDP (refused as before).
func (d *daemon) startUDP(ctx context.Context, cfg *conf.Config) error {
	switch p := d.opts.Platform.(type) {
	case udpSocketPlatform:
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
	case udpRelayPlatform:
		p.UseRouter(d.r)
	}
	return nil
}
