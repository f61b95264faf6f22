package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/agentcage/router/router/upstream"
)

// DialUpstreamUDP opens a UDP association through the named upstream (a proxy, or a
// failover list joined by ",") and returns it as a datagram connection to address
// (host:port; a host that is not an IP goes to the proxy as a name): each Write sends one
// datagram to address, each Read returns the next datagram from it (answers from other
// addresses are dropped). Deadlines are not supported; Close ends a blocked Read. The DNS
// side uses it for [dns] transport = "udp".
func (r *Router) DialUpstreamUDP(ctx context.Context, proxy, address string) (net.Conn, error) {
	dst, err := upstream.ParseAddr(address)
	if err != nil {
		return nil, err
	}
	a, _, err := associate(ctx, r.pol.Load(), proxy)
	if err != nil {
		return nil, fmt.Errorf("associate for %s via %s: %w", address, proxy, err)
	}
	return &assocConn{a: a, dst: dst, buf: make([]byte, upstream.ReadBufLen)}, nil
}

// assocConn is an association seen as a datagram connection to dst. Reads are not meant to
// be concurrent (buf is the one read buffer).
type assocConn struct {
	a   upstream.Association
	dst upstream.Addr
	buf []byte
}

func (c *assocConn) Write(p []byte) (int, error) { return c.a.WriteTo(p, c.dst) }

func (c *assocConn) Read(p []byte) (int, error) {
	for {
		n, from, err := c.a.ReadFrom(c.buf)
		if err != nil {
			return 0, err
		}
		// A name may come back as the IP the proxy resolved it to: the port tells.
		if from == c.dst || c.dst.Name != "" && from.Port == c.dst.Port || from.IP.Unmap() == c.dst.IP.Unmap() && from.Port == c.dst.Port {
			if n > len(p) { // never cut: the caller learns the datagram did not fit
				return 0, fmt.Errorf("udp association: a %d-byte answer for a %d-byte buffer: %w", n, len(p), upstream.ErrTooLarge)
			}
			return copy(p, c.buf[:n]), nil
		}
	}
}

func (c *assocConn) Close() error                       { return c.a.Close() }
func (c *assocConn) LocalAddr() net.Addr                { return &net.UDPAddr{} }
func (c *assocConn) RemoteAddr() net.Addr               { return &net.UDPAddr{} }
func (c *assocConn) SetDeadline(t time.Time) error      { return errNoDeadline }
func (c *assocConn) SetReadDeadline(t time.Time) error  { return errNoDeadline }
func (c *assocConn) SetWriteDeadline(t time.Time) error { return errNoDeadline }

var errNoDeadline = errors.New("udp association: deadlines are not supported")
