package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/agentcage/router/router/upstream/socks5"
)

// socksUpstream is a SOCKS5 proxy.
type socksUpstream struct {
	name     string
	ep       *endpoint
	client   socks5.Client
	pipeline bool
	opts     Options
}

func newSOCKS5(cfg Config, ep *endpoint, opts Options) *socksUpstream {
	u := &socksUpstream{name: cfg.Name, ep: ep, client: socks5.Client{Pipeline: cfg.Pipeline}, pipeline: cfg.Pipeline, opts: opts}
	if cfg.Username != "" {
		u.client.Auth = &socks5.Auth{Username: cfg.Username, Password: cfg.Password}
	}
	return u
}

func (u *socksUpstream) Name() string { return u.name }

// answerLen is how many bytes of the server's answers come before the
// reply to the request: the method selection and, with credentials, the
// sub-negotiation status.
func (u *socksUpstream) answerLen() int {
	if u.client.Auth != nil {
		return 4
	}
	return 2
}

// Connect asks the proxy to CONNECT to dst.
func (u *socksUpstream) Connect(ctx context.Context, dst Addr, early []byte) (net.Conn, error) {
	return connectThrough(ctx, protocol{
		name: u.name, ep: u.ep, pipeline: u.pipeline,
		shake: func(hc *handshakeConn) error {
			_, err := u.client.Handshake(hc, dst)
			return err
		},
		// Once the proxy's answers before the reply are in, it has read the request and may
		// have connected and relayed the early bytes, unless it says it did not.
		relayed: func(hc *handshakeConn, err error) bool {
			return hc.read >= u.answerLen() && !isReply(err) &&
				!errors.Is(err, socks5.ErrAuthFailed) && !errors.Is(err, socks5.ErrNoAcceptableMethods)
		},
		refused: isRefusal,
	}, dst, early)
}

// Associate asks the proxy for a UDP association and opens the UDP socket
// to its relay.
func (u *socksUpstream) Associate(ctx context.Context) (Association, error) {
	fail := func(err error, refused bool) (Association, error) {
		return nil, &Error{Upstream: u.name, Op: "associate", Refused: refused, Err: err}
	}
	if u.ep.via != nil {
		// The relay's UDP would leave this host for the relay's address directly, outside
		// the hops before it.
		return fail(fmt.Errorf("a proxy reached through %s carries no UDP: %w", u.ep.via.Name(), ErrUDPUnsupported), false)
	}
	c, err := u.ep.connect(ctx)
	if err != nil {
		return fail(err, false)
	}
	release := bind(ctx, c)
	relay, err := u.client.Associate(c, socks5.Addr{})
	if cerr := release(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		c.Close()
		return fail(withCtx(ctx, err), isAssociateRefusal(err))
	}
	ap, err := u.relayAddr(ctx, c, relay)
	if err != nil {
		c.Close()
		return fail(withCtx(ctx, err), false)
	}
	uc, err := u.opts.Dial(ctx, "udp", ap.String())
	if err != nil {
		c.Close()
		return fail(withCtx(ctx, fmt.Errorf("dial relay %s: %w", ap, err)), false)
	}
	return newAssociation(u.name, c, uc, ap, u.opts.Log), nil
}

// relayAddr turns the relay a proxy reported into an address to send to.
// An unspecified address (a proxy listening on every interface) means the
// proxy's own address, the control connection's peer; a name is looked up.
func (u *socksUpstream) relayAddr(ctx context.Context, ctrl net.Conn, relay Addr) (netip.AddrPort, error) {
	if relay.Port == 0 {
		return netip.AddrPort{}, fmt.Errorf("relay %v has port 0", relay)
	}
	ip := relay.IP.Unmap()
	switch {
	case relay.Name != "":
		addrs, err := u.opts.Resolve(ctx, relay.Name)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no address")
		}
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("resolve relay %s: %w", relay.Name, err)
		}
		ip = addrs[0].Unmap()
	case ip.IsUnspecified():
		peer, ok := ctrl.RemoteAddr().(*net.TCPAddr)
		if !ok {
			return netip.AddrPort{}, fmt.Errorf("relay %v is unspecified and the proxy's address is unknown", relay)
		}
		ip = peer.AddrPort().Addr().Unmap()
	}
	return netip.AddrPortFrom(ip, relay.Port), nil
}

// isReply reports whether err carries a well-formed failure reply: the
// proxy did not carry out the request.
func isReply(err error) bool {
	var re *socks5.ReplyError
	return errors.As(err, &re)
}

// isRefusal reports whether err is an answer to a CONNECT that blames the
// destination, not the proxy (see the package documentation): SOCKS5 REP
// X'02' to X'08', whatever the guest chose to make the proxy say them (an
// IPv6 literal gets X'08' from a proxy without IPv6), or an HTTP refusal.
func isRefusal(err error) bool {
	var re *socks5.ReplyError
	if errors.As(err, &re) {
		return re.Code >= socks5.RepNotAllowed && re.Code <= socks5.RepAddrTypeNotSupported
	}
	return isHTTPRefusal(err)
}

// isAssociateRefusal is isRefusal for UDP ASSOCIATE, whose request names no
// destination a guest chose: X'07' and X'08' there say that the proxy has
// no UDP, which counts against it.
func isAssociateRefusal(err error) bool {
	var re *socks5.ReplyError
	return errors.As(err, &re) && re.Code >= socks5.RepNotAllowed && re.Code <= socks5.RepTTLExpired
}

// withCtx adds ctx's error to err when ctx has ended, so that errors.Is
// tells a timeout (context.DeadlineExceeded) or a cancellation from other
// failures.
func withCtx(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded // the connection's deadline was first
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", err, cerr)
	}
	return err
}
