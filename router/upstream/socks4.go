package upstream

import (
	"context"
	"errors"
	"fmt"
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
	fail := func(err error, refused, sent bool) (net.Conn, error) {
		return nil, &Error{Upstream: u.name, Op: "connect", Dst: dst, Refused: refused, Sent: sent, Err: err}
	}
	if _, err := socks4.AppendRequest(nil, u.client.UserID, dst.Name, dst.IP, dst.Port); err != nil {
		// The flow's fault (an IPv6 destination), not the proxy's: it stays healthy.
		return fail(err, true, false)
	}
	c, err := u.ep.connect(ctx)
	if err != nil {
		return fail(err, false, false)
	}
	release := bind(ctx, c)
	hc := &handshakeConn{Conn: c}
	if u.pipeline {
		hc.early = early
	}
	err = u.client.Handshake(hc, dst.Name, dst.IP, dst.Port)
	var re *socks4.ReplyError
	isReply := errors.As(err, &re)
	sent := false
	if err != nil {
		sent = u.pipeline && len(early) > 0 && !isReply
	} else if !u.pipeline && len(early) > 0 {
		sent = true
		if _, werr := c.Write(early); werr != nil {
			err = fmt.Errorf("write early bytes: %w", werr)
		}
	}
	if cerr := release(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		c.Close()
		// 91 is the proxy's answer about the destination (or its policy); 92 and 93 (identd)
		// are about this client, and count against the proxy like a refused login.
		return fail(withCtx(ctx, err), isReply && re.Code == socks4.Rejected, sent)
	}
	return c, nil
}

// Associate fails: SOCKS4 carries TCP only.
func (u *socks4Upstream) Associate(context.Context) (Association, error) {
	return nil, &Error{Upstream: u.name, Op: "associate", Err: ErrUDPUnsupported}
}
