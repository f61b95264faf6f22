package upstream

import (
	"context"
	"errors"
	"net"

	"github.com/agentcage/router/router/upstream/socks4"
)

// socks4Upstream is a SOCKS4 proxy: SOCKS4a when the destination is a name (the name goes to
// the proxy, as with SOCKS5), SOCKS4 when it is an IPv4 address. An IPv6 destination is
// refused before the proxy is dialed: SOCKS4 cannot carry it, and nothing here resolves a
// name or picks another address family for the flow. A proxy that speaks SOCKS4 only
// answers a SOCKS4a request with 91, and the flow is refused: the router never resolves the
// name itself to help it (that lookup would leave outside the proxy).
type socks4Upstream struct {
	name     string
	ep       *endpoint
	client   socks4.Client
	pipeline bool
}

func newSOCKS4(cfg Config, ep *endpoint) *socks4Upstream {
	return &socks4Upstream{name: cfg.Name, ep: ep, client: socks4.Client{UserID: cfg.Username}, pipeline: cfg.Pipeline}
}

func (u *socks4Upstream) Name() string { return u.name }

// Connect asks the proxy to CONNECT to dst.
func (u *socks4Upstream) Connect(ctx context.Context, dst Addr, early []byte) (net.Conn, error) {
	if _, err := socks4.AppendRequest(nil, u.client.UserID, dst.Name, dst.IP, dst.Port); err != nil {
		// The flow's fault (an IPv6 destination), not the proxy's: it stays healthy.
		return nil, &Error{Upstream: u.name, Op: "connect", Dst: dst, Refused: true, Err: err}
	}
	return connectThrough(ctx, protocol{
		name: u.name, ep: u.ep, pipeline: u.pipeline,
		shake: func(hc *handshakeConn) error {
			return u.client.Handshake(hc, dst.Name, dst.IP, dst.Port)
		},
		// A reply (granted or not) means the proxy read the request and answered it.
		relayed: func(_ *handshakeConn, err error) bool {
			var re *socks4.ReplyError
			return !errors.As(err, &re)
		},
		// 91 is the proxy's answer about the destination (or its policy); 92 and 93 (identd)
		// are about this client, and count against the proxy like a refused login.
		refused: func(err error) bool {
			var re *socks4.ReplyError
			return errors.As(err, &re) && re.Code == socks4.Rejected
		},
	}, dst, early)
}

// Associate fails: SOCKS4 carries TCP only.
func (u *socks4Upstream) Associate(context.Context) (Association, error) {
	return nil, &Error{Upstream: u.name, Op: "associate", Err: ErrUDPUnsupported}
}
