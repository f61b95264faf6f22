package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/agentcage/router/router/upstream"
)

// dialUDPDirect opens the router's own socket (marked: never captured) to dst for a flow a
// rule sends direct, as an upstream.Association whose answers report dst (the flow's
// original destination). A fake IP is first resolved through the proxy, never locally,
// unless the policy checked what it resolves to (resolved): then those addresses are
// dialed.
func (r *Router) dialUDPDirect(ctx context.Context, dst netip.AddrPort, host string, fake bool, resolved []netip.Addr) (upstream.Association, error) {
	target := dst.Addr()
	switch {
	case fake && len(resolved) > 0:
		target = resolved[0]
	case fake:
		addrs, err := r.opts.Names.ResolveViaProxy(ctx, host)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no address")
		}
		if err != nil {
			return nil, fmt.Errorf("resolve %s via proxy: %w", host, err)
		}
		target = addrs[0]
	}
	c, err := r.dialer.DialContext(ctx, "udp", netip.AddrPortFrom(target, dst.Port()).String())
	if err != nil {
		return nil, fmt.Errorf("udp direct: %w", err)
	}
	return &directAssoc{c: c, as: upstream.Addr{IP: dst.Addr(), Port: dst.Port()}, done: make(chan struct{})}, nil
}

// directAssoc is a connected UDP socket seen as an association with one destination: what
// it sends goes to its peer, whatever address WriteTo is given, and what it reads is
// reported as coming from as.
type directAssoc struct {
	c    net.Conn
	as   upstream.Addr
	done chan struct{}
	once sync.Once
}

func (d *directAssoc) WriteTo(p []byte, _ upstream.Addr) (int, error) {
	n, err := d.c.Write(p)
	if err != nil && upstream.TooLarge(err) {
		return n, fmt.Errorf("udp direct: send %d bytes: %w: %w", len(p), upstream.ErrTooLarge, err)
	}
	return n, err
}

func (d *directAssoc) ReadFrom(p []byte) (int, upstream.Addr, error) {
	for {
		n, err := d.c.Read(p)
		if err == nil && n == len(p) { // may have been cut: the caller's buffer was too short
			return n, d.as, fmt.Errorf("udp direct: an answer of %d bytes or more: %w", n, upstream.ErrTooLarge)
		}
		if err == nil {
			return n, d.as, nil
		}
		select {
		case <-d.done:
			return 0, upstream.Addr{}, d.Err()
		default:
		}
		// An ICMP error for an earlier datagram (port unreachable) is reported on the next
		// read of a connected socket: the socket is still good.
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
			continue
		}
		d.Close()
		return 0, upstream.Addr{}, fmt.Errorf("udp direct: %w", err)
	}
}

func (d *directAssoc) Done() <-chan struct{} { return d.done }

func (d *directAssoc) Err() error {
	select {
	case <-d.done:
		return fmt.Errorf("udp direct: %w", net.ErrClosed)
	default:
		return nil
	}
}

func (d *directAssoc) Close() error {
	d.once.Do(func() {
		close(d.done)
		d.c.Close()
	})
	return nil
}
