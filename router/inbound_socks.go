package router

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"

	gosocks5 "github.com/things-go/go-socks5"
	"github.com/things-go/go-socks5/statute"

	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules/policy"
)

// The SOCKS5 inbound is the server side of github.com/things-go/go-socks5 (RFC 1928): it
// reads the greeting (no authentication), the request and the destination, with no resolver
// (a name is never looked up here), and hands CONNECT to socksConnect, which sets the flow up
// through the router. BIND and UDP ASSOCIATE are answered X'07' (command not supported).

// socksServer reads one SOCKS5 request per connection; it holds no per-connection state.
type socksServer interface {
	ServeConn(c net.Conn) error
}

func (r *Router) newSOCKSServer() socksServer {
	return gosocks5.NewServer(
		gosocks5.WithResolver(unresolved{}),
		gosocks5.WithConnectHandle(socksConnect),
		gosocks5.WithBindHandle(socksUnsupported),
		gosocks5.WithAssociateHandle(socksUnsupported),
	)
}

// unresolved is go-socks5's resolver: it resolves nothing, so the name stays the request's.
type unresolved struct{}

func (unresolved) Resolve(ctx context.Context, _ string) (context.Context, net.IP, error) {
	return ctx, nil, nil
}

// socksConnect sets up the flow a CONNECT asks for. w is the *inboundConn given to ServeConn.
func socksConnect(_ context.Context, w io.Writer, req *gosocks5.Request) error {
	c, ok := w.(*inboundConn)
	if !ok {
		return fmt.Errorf("socks5 inbound: connection of type %T", w)
	}
	var host string
	switch d := req.RawDestAddr; {
	case d.FQDN != "":
		host = d.FQDN
	case d.IP != nil:
		if a, ok := netip.AddrFromSlice(d.IP); ok {
			host = a.Unmap().String()
		}
	}
	rq, err := target(host, uint16(req.RawDestAddr.Port))
	if err != nil {
		_ = gosocks5.SendReply(c.TCPConn, statute.RepHostUnreachable, nil)
		return fmt.Errorf("connect to %q: %w", host, err)
	}
	if br, ok := req.Reader.(*bufio.Reader); ok && br.Buffered() > 0 {
		// Bytes the client sent right behind its request (go-socks5 reads through a
		// bufio.Reader of 4 KiB, earlyMax): they go first, then the relay moves the rest.
		rq.early, _ = br.Peek(min(br.Buffered(), earlyMax))
	}
	c.s.flow(c, rq, socksReply{c.TCPConn})
	return nil
}

func socksUnsupported(_ context.Context, w io.Writer, req *gosocks5.Request) error {
	_ = gosocks5.SendReply(w, statute.RepCommandNotSupported, nil)
	return fmt.Errorf("command %d not supported", req.Command)
}

// socksReply answers a CONNECT (RFC 1928 §6).
type socksReply struct{ c *net.TCPConn }

// ok replies success with BND.ADDR 0.0.0.0:0: the router's own address towards the
// destination (or the proxy) is none of the guest's business.
func (s socksReply) ok() error {
	return gosocks5.SendReply(s.c, statute.RepSuccess, &net.TCPAddr{IP: net.IPv4zero})
}

func (s socksReply) fail(err error) { _ = gosocks5.SendReply(s.c, socksFailure(err), nil) }

// refused answers "not allowed by ruleset": SOCKS5 has no room for why.
func (s socksReply) refused(*FlowRecord, policy.Decision) { s.fail(nil) }

// socksFailure is the reply for a refused (err nil) or failed flow: X'02' not allowed by the
// ruleset; X'01' when the upstream proxy itself failed; X'05', X'03' for a direct
// connection refused or a network unreachable; X'04' host unreachable otherwise (the proxy
// answered that it cannot reach the destination, a timeout, a name that does not resolve).
func socksFailure(err error) uint8 {
	var ue *upstream.Error
	switch {
	case err == nil:
		return statute.RepRuleFailure
	case errors.As(err, &ue) && !ue.Refused:
		return statute.RepServerFailure
	case errors.Is(err, syscall.ECONNREFUSED):
		return statute.RepConnectionRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return statute.RepNetworkUnreachable
	default:
		return statute.RepHostUnreachable
	}
}
