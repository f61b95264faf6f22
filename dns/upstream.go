package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// Upstream connection limits.
const (
	maxUpstreamConns = 16               // concurrent TCP connections to the resolver
	maxIdleConns     = 4                // kept open for reuse
	idleConnTimeout  = 10 * time.Second // an idle connection older than this is not reused
)

var errClosed = errors.New("dns server closed")

// tcpUpstream sends queries over TCP (RFC 1035 §4.2.2, RFC 7766) to one resolver, through
// whatever dial gives it (the SOCKS5 upstream in production). One query at a time per
// connection, no pipelining; a connection that answered is kept for the next query (up to
// maxIdleConns, for idleConnTimeout) and a query that fails on a reused connection is retried
// once on a fresh one, since resolvers close idle connections at will.
//
// mu guards idle and closed. Safe for concurrent use; after close every exchange fails.
type tcpUpstream struct {
	dial DialFunc
	addr string
	now  func() time.Time
	sem  chan struct{} // one token per open connection

	mu     sync.Mutex
	idle   []idleConn // most recently used last
	closed bool
}

type idleConn struct {
	c     net.Conn
	since time.Time
}

func newTCPUpstream(dial DialFunc, addr string, now func() time.Time) *tcpUpstream {
	return &tcpUpstream{dial: dial, addr: addr, now: now, sem: make(chan struct{}, maxUpstreamConns)}
}

// exchange sends q (whose Id it overwrites) and returns the checked reply.
func (u *tcpUpstream) exchange(ctx context.Context, q *mdns.Msg) (*mdns.Msg, error) {
	select {
	case u.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a connection to %s: %w", u.addr, ctx.Err())
	}
	defer func() { <-u.sem }()
	for attempt := 0; ; attempt++ {
		c, reused, err := u.conn(ctx)
		if err != nil {
			return nil, err
		}
		r, err := exchangeStream(ctx, c, q)
		if err == nil {
			u.putIdle(c)
			return r, nil
		}
		c.Close()
		if !reused || attempt > 0 || ctx.Err() != nil {
			return nil, fmt.Errorf("exchange with %s: %w", u.addr, err)
		}
	}
}

// conn returns an idle connection or dials a new one.
func (u *tcpUpstream) conn(ctx context.Context) (c net.Conn, reused bool, err error) {
	now := u.now()
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil, false, errClosed
	}
	for len(u.idle) > 0 {
		ic := u.idle[len(u.idle)-1]
		u.idle = u.idle[:len(u.idle)-1]
		if now.Sub(ic.since) < idleConnTimeout {
			u.mu.Unlock()
			return ic.c, true, nil
		}
		ic.c.Close()
	}
	u.mu.Unlock()
	c, err = u.dial(ctx, "tcp", u.addr)
	if err != nil {
		return nil, false, fmt.Errorf("dial %s: %w", u.addr, err)
	}
	return c, false, nil
}

func (u *tcpUpstream) putIdle(c net.Conn) {
	c.SetDeadline(time.Time{})
	now := u.now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed || len(u.idle) >= maxIdleConns {
		c.Close()
		return
	}
	u.idle = append(u.idle, idleConn{c: c, since: now})
}

// close closes the idle connections; exchanges in flight finish or fail on their own.
func (u *tcpUpstream) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	for _, ic := range u.idle {
		ic.c.Close()
	}
	u.idle = nil
}

// exchangeStream writes q with a random Id and the 2-byte length prefix of RFC 1035 §4.2.2 on
// c and reads the reply, honouring ctx's deadline and cancellation.
func exchangeStream(ctx context.Context, c net.Conn, q *mdns.Msg) (*mdns.Msg, error) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	q.Id = uint16(rand.Uint32())
	wire, err := q.Pack()
	if err != nil {
		return nil, fmt.Errorf("pack query: %w", err)
	}
	buf := make([]byte, 2+len(wire))
	binary.BigEndian.PutUint16(buf, uint16(len(wire)))
	copy(buf[2:], wire)
	if _, err := c.Write(buf); err != nil {
		return nil, fmt.Errorf("write query: %w", err)
	}
	var lenBuf [2]byte
	if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("read reply length: %w", err)
	}
	body := make([]byte, binary.BigEndian.Uint16(lenBuf[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	return checkReply(q, body)
}

// checkReply unpacks body and checks that it answers q: same Id, QR set, same question
// (names compared case-insensitively).
func checkReply(q *mdns.Msg, body []byte) (*mdns.Msg, error) {
	r := new(mdns.Msg)
	if err := r.Unpack(body); err != nil {
		return nil, fmt.Errorf("unpack reply: %w", err)
	}
	if r.Id != q.Id || !r.Response {
		return nil, fmt.Errorf("reply id %d response %v does not answer query id %d", r.Id, r.Response, q.Id)
	}
	if len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, q.Question[0].Name) ||
		r.Question[0].Qtype != q.Question[0].Qtype || r.Question[0].Qclass != q.Question[0].Qclass {
		return nil, fmt.Errorf("reply question %v does not match query %v", r.Question, q.Question[0])
	}
	return r, nil
}

// exchangeDirect asks the host's resolver at addr over UDP and retries over TCP when the reply
// is truncated; both through dial (the router's own, uncaptured dialer). Only names listed in
// Config.DirectNames ever get here.
func exchangeDirect(ctx context.Context, dial DialFunc, addr string, q *mdns.Msg) (*mdns.Msg, error) {
	r, err := exchangeDatagram(ctx, dial, addr, q)
	if err != nil {
		return nil, err
	}
	if !r.Truncated {
		return r, nil
	}
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial tcp %s: %w", addr, err)
	}
	defer c.Close()
	r, err = exchangeStream(ctx, c, q)
	if err != nil {
		return nil, fmt.Errorf("exchange with tcp %s: %w", addr, err)
	}
	return r, nil
}

// exchangeDatagram sends q once over UDP and waits for the matching reply, ignoring datagrams
// that do not answer it (wrong Id or question), until ctx ends.
func exchangeDatagram(ctx context.Context, dial DialFunc, addr string, q *mdns.Msg) (*mdns.Msg, error) {
	c, err := dial(ctx, "udp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial udp %s: %w", addr, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	q.Id = uint16(rand.Uint32())
	wire, err := q.Pack()
	if err != nil {
		return nil, fmt.Errorf("pack query: %w", err)
	}
	if _, err := c.Write(wire); err != nil {
		return nil, fmt.Errorf("write udp %s: %w", addr, err)
	}
	buf := make([]byte, mdns.MaxMsgSize)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, fmt.Errorf("read udp %s: %w", addr, err)
		}
		if r, err := checkReply(q, buf[:n]); err == nil {
			return r, nil
		}
	}
}
