package upstream

import (
	"context"
	"fmt"
	"net"
)

// protocol is what one upstream type adds to the CONNECT skeleton that every type shares
// ([connectThrough]): the dial, the deadline bound to ctx, where the early bytes go, when
// they count as sent, and how a failure is classified are decided there, once.
type protocol struct {
	name     string    // the upstream's name, for its errors
	ep       *endpoint // how the proxy is reached (directly, or through the hops of via)
	pipeline bool      // the early bytes go with the request, before the proxy answers

	// secure, when not nil, wraps the connection to the proxy before the handshake (TLS to
	// an HTTPS proxy). It returns the wrapped connection even when it fails, so that closing
	// it closes the dialed one.
	secure func(ctx context.Context, c net.Conn) (net.Conn, error)
	// shake speaks the protocol's request over hc and reads the answer.
	shake func(hc *handshakeConn) error
	// relayed reports, for a handshake that failed after the early bytes were pipelined,
	// whether the proxy may have relayed them: false only when its answer says it did not.
	relayed func(hc *handshakeConn, err error) bool
	// refused reports whether a failure blames the destination, not the proxy (see the
	// package documentation).
	refused func(err error) bool
}

// connectThrough is the CONNECT of every upstream type: it dials the proxy, runs p's
// handshake with the early bytes (pipelined with the request, or written after the answer),
// and returns the tunnel, or an *Error whose Sent says whether the early bytes may have
// reached the destination (a retry elsewhere is safe only when they cannot have) and whose
// Refused says whether the failure blames the destination.
func connectThrough(ctx context.Context, p protocol, dst Addr, early []byte) (net.Conn, error) {
	fail := func(err error, refused, sent bool) (net.Conn, error) {
		return nil, &Error{Upstream: p.name, Op: "connect", Dst: dst, Refused: refused, Sent: sent, Err: err}
	}
	c, err := p.ep.connect(ctx)
	if err != nil {
		return fail(err, false, false)
	}
	release := bind(ctx, c)
	conn := c
	if p.secure != nil {
		conn, err = p.secure(ctx, c)
	}
	sent := false
	if err == nil {
		hc := &handshakeConn{Conn: conn}
		if p.pipeline {
			hc.early = early
		}
		err = p.shake(hc)
		if err != nil {
			sent = p.pipeline && len(early) > 0 && p.relayed(hc, err)
		} else if !p.pipeline && len(early) > 0 {
			sent = true
			if _, werr := conn.Write(early); werr != nil {
				err = fmt.Errorf("write early bytes: %w", werr)
			}
		}
	}
	if cerr := release(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		conn.Close()
		return fail(withCtx(ctx, err), p.refused(err), sent)
	}
	return conn, nil
}
