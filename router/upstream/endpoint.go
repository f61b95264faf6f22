package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
)

// endpoint is where a proxy listens, and how to reach it: the host's
// addresses, remembered between flows, and the dial function.
//
// A host given as an IP is dialed as is. A host name is looked up on the
// first dial, and its addresses are remembered until a dial where none of
// them connects; the next dial then looks the name up again (the proxy may
// have moved). A lookup that fails or returns nothing is not remembered, so
// a name that does not resolve at boot is tried again by the next flow,
// never stuck.
type endpoint struct {
	name    string // the upstream's, for errors
	host    string
	port    uint16
	literal netip.Addr // valid when host is an IP
	dial    func(ctx context.Context, network, address string) (net.Conn, error)
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	via     Upstream // when set, connect tunnels through it (a chain) and dial is not used

	mu    sync.Mutex   // guards addrs
	addrs []netip.Addr // the last lookup's answer; nil when none is remembered
}

func newEndpoint(name, host string, port uint16, opts Options) *endpoint {
	e := &endpoint{name: name, host: host, port: port, dial: opts.Dial, resolve: opts.Resolve, via: opts.Via}
	if a, err := netip.ParseAddr(host); err == nil {
		e.literal = a.Unmap()
	}
	return e
}

// String returns host:port.
func (e *endpoint) String() string {
	return net.JoinHostPort(e.host, strconv.Itoa(int(e.port)))
}

// lookup returns the addresses to dial.
func (e *endpoint) lookup(ctx context.Context) ([]netip.Addr, error) {
	if e.literal.IsValid() {
		return []netip.Addr{e.literal}, nil
	}
	e.mu.Lock()
	addrs := e.addrs
	e.mu.Unlock()
	if len(addrs) > 0 {
		return addrs, nil
	}
	addrs, err := e.resolve(ctx, e.host)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no address")
	}
	if err != nil {
		return nil, fmt.Errorf("resolve proxy host %s: %w", e.host, err)
	}
	addrs = slices.Clone(addrs)
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	e.mu.Lock()
	e.addrs = addrs
	e.mu.Unlock()
	return addrs, nil
}

// forget drops the remembered addresses if they are still used: a later
// lookup's answer is kept.
func (e *endpoint) forget(used []netip.Addr) {
	e.mu.Lock()
	if slices.Equal(e.addrs, used) {
		e.addrs = nil
	}
	e.mu.Unlock()
}

// connect dials the proxy over TCP: each address in turn until one
// connects, all within ctx. Through a via, it asks the via for a tunnel to
// the proxy's host as written (a name goes to the via unresolved).
func (e *endpoint) connect(ctx context.Context) (net.Conn, error) {
	if e.via != nil {
		dst := Addr{IP: e.literal, Port: e.port}
		if !e.literal.IsValid() {
			dst = Addr{Name: e.host, Port: e.port}
		}
		c, err := e.via.Connect(ctx, dst, nil)
		if err != nil {
			return nil, fmt.Errorf("reach proxy %s through %s: %w", e, e.via.Name(), err)
		}
		return c, nil
	}
	addrs, err := e.lookup(ctx)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, e.port)
		c, err := e.dial(ctx, "tcp", ap.String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if !e.literal.IsValid() {
		e.forget(addrs)
	}
	return nil, fmt.Errorf("dial proxy %s: %w", e, errors.Join(errs...))
}

// longAgo is a deadline in the past: setting it wakes every blocked read
// and write on a connection.
var longAgo = time.Unix(1, 0)

// bind ties c to ctx for a handshake: ctx's deadline becomes c's, and
// ctx's end (cancellation or deadline) wakes c's blocked calls. release
// undoes both and returns ctx's error when ctx ended before it (c is then
// unusable: close it).
func bind(ctx context.Context, c net.Conn) (release func() error) {
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(longAgo) })
	return func() error {
		if !stop() && ctx.Err() != nil {
			return ctx.Err()
		}
		_ = c.SetDeadline(time.Time{})
		return nil
	}
}

// handshakeConn is the connection a handshake runs on: its first write
// carries early too (the pipelined request and the client's first bytes go
// out together), and it counts the bytes read, which tells how far the
// proxy's answer got.
type handshakeConn struct {
	net.Conn
	early []byte // sent with the first write, then nil
	read  int
}

func (h *handshakeConn) Read(p []byte) (int, error) {
	n, err := h.Conn.Read(p)
	h.read += n
	return n, err
}

func (h *handshakeConn) Write(p []byte) (int, error) {
	if len(h.early) == 0 {
		return h.Conn.Write(p)
	}
	early := h.early
	h.early = nil
	if tc, ok := h.Conn.(*net.TCPConn); ok {
		// One writev: the request and the early bytes leave in one segment
		// when they fit.
		bufs := net.Buffers{p, early}
		n, err := bufs.WriteTo(tc)
		return int(min(n, int64(len(p)))), err
	}
	// TLS and others: one record.
	b := make([]byte, 0, len(p)+len(early))
	n, err := h.Conn.Write(append(append(b, p...), early...))
	return min(n, len(p)), err
}
