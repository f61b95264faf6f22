package platform

import (
	"net/netip"

	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/windivert/redirect"
)

// UseRouter: the engine hands the UDP flows that need the router (a proxy verdict, a fake
// IP, a decision a name could change) to r, which answers through the engine.
func (p *redirectPlatform) UseRouter(r capture.UDPRouter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.router = r
}

// engineUDP joins the redirect engine and the router: the engine's relayed datagrams go to
// Router.HandleUDP, and the router's answers are injected by the engine. eng is set once,
// right after the engine is made and before it runs.
type engineUDP struct {
	r   capture.UDPRouter
	eng *redirect.Engine
}

func (u *engineUDP) RelayUDP(f redirect.UDPFlow, p []byte) {
	u.r.HandleUDP(capture.Datagram{Src: f.Src, Dst: f.Dst, Payload: p, Owner: f.Owner, OwnerKnown: f.OwnerKnown}, u)
}

func (u *engineUDP) Reply(client, from netip.AddrPort, p []byte) error {
	return u.eng.ReplyUDP(client, from, p)
}

// Release: the engine's flow expires on its own (UDPIdle).
func (u *engineUDP) Release(client, from netip.AddrPort) {}
