package dns

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// PacketDialFunc opens a datagram connection to addr ("host:port") through the proxy (a
// SOCKS5 UDP association): each Write sends one datagram to addr, each Read returns one
// datagram from it. Read need not honour deadlines; Close must end a blocked Read.
type PacketDialFunc func(ctx context.Context, addr string) (net.Conn, error)

// exchanger is how relayed queries reach the resolver through the proxy.
type exchanger interface {
	exchange(ctx context.Context, q *mdns.Msg) (*mdns.Msg, error)
	close()
}

// udpResend is how long a query waits for its answer before it is sent again (a datagram
// through the proxy may be lost), within the query's own deadline.
const udpResend = time.Second

// udpUpstream sends queries as datagrams to one resolver through one association of the
// proxy (Dialers.ProxyPacket), shared by every query: a reader goroutine hands each answer
// to the query with its Id, and the query checks it (checkReply). The association is made at
// the first query and made again when it has ended (the proxy dropped it); a query whose
// association ends waits for its next resend, which uses the new one. A truncated answer is
// asked again over TCP (tcp, when the proxy has a TCP dialer), as RFC 1035 §4.2.1 says.
//
// mu guards conn, pending and closed. Safe for concurrent use; after close every exchange
// fails.
type udpUpstream struct {
	dial PacketDialFunc
	addr string
	tcp  *tcpUpstream // nil: a truncated answer is returned as it is
	sem  chan struct{}

	mu      sync.Mutex
	conn    net.Conn
	pending map[uint16]chan []byte
	closed  bool
	dialing sync.Mutex // one dial at a time
}

func newUDPUpstream(dial PacketDialFunc, addr string, tcp *tcpUpstream) *udpUpstream {
	return &udpUpstream{dial: dial, addr: addr, tcp: tcp, pending: map[uint16]chan []byte{}, sem: make(chan struct{}, 256)}
}

func (u *udpUpstream) exchange(ctx context.Context, q *mdns.Msg) (*mdns.Msg, error) {
	select {
	case u.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait to ask %s: %w", u.addr, ctx.Err())
	}
	defer func() { <-u.sem }()
	answers := make(chan []byte, 4)
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil, errClosed
	}
	for {
		q.Id = uint16(rand.Uint32())
		if _, taken := u.pending[q.Id]; !taken {
			break
		}
	}
	u.pending[q.Id] = answers
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		delete(u.pending, q.Id)
		u.mu.Unlock()
	}()
	wire, err := q.Pack()
	if err != nil {
		return nil, fmt.Errorf("pack query: %w", err)
	}
	resend := time.NewTimer(0)
	defer resend.Stop()
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return nil, fmt.Errorf("exchange with %s over udp: %w (%w)", u.addr, ctx.Err(), lastErr)
			}
			return nil, fmt.Errorf("exchange with %s over udp: %w", u.addr, ctx.Err())
		case <-resend.C:
			if err := u.send(ctx, wire); err != nil {
				lastErr = err
			}
			resend.Reset(udpResend)
		case b := <-answers:
			r, err := checkReply(q, b)
			if err != nil {
				lastErr = err
				continue // not the answer: a late one of another query that had this Id
			}
			if r.Truncated && u.tcp != nil {
				return u.tcp.exchange(ctx, q)
			}
			return r, nil
		}
	}
}

// send writes one datagram on the association, making one when there is none; when the
// association turns out to have ended, once more on a new one.
func (u *udpUpstream) send(ctx context.Context, wire []byte) error {
	var err error
	for range 2 {
		var c net.Conn
		if c, err = u.connection(ctx); err != nil {
			return err
		}
		if _, err = c.Write(wire); err == nil {
			return nil
		}
		u.drop(c)
	}
	return fmt.Errorf("send to %s: %w", u.addr, err)
}

// connection returns the association, dialing it when there is none.
func (u *udpUpstream) connection(ctx context.Context) (net.Conn, error) {
	u.dialing.Lock()
	defer u.dialing.Unlock()
	u.mu.Lock()
	c, closed := u.conn, u.closed
	u.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	if c != nil {
		return c, nil
	}
	c, err := u.dial(ctx, u.addr)
	if err != nil {
		return nil, fmt.Errorf("associate for %s: %w", u.addr, err)
	}
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		c.Close()
		return nil, errClosed
	}
	u.conn = c
	u.mu.Unlock()
	go u.read(c)
	return c, nil
}

// read hands the answers that come on c to their queries until c fails.
func (u *udpUpstream) read(c net.Conn) {
	buf := make([]byte, mdns.MaxMsgSize)
	for {
		n, err := c.Read(buf)
		if err != nil {
			u.drop(c)
			return
		}
		if n < 2 {
			continue
		}
		id := binary.BigEndian.Uint16(buf)
		u.mu.Lock()
		ch := u.pending[id]
		u.mu.Unlock()
		if ch == nil {
			continue
		}
		select {
		case ch <- append([]byte(nil), buf[:n]...):
		default: // the query has answers enough to look at
		}
	}
}

// drop forgets c (when it is still the association) and closes it.
func (u *udpUpstream) drop(c net.Conn) {
	u.mu.Lock()
	if u.conn == c {
		u.conn = nil
	}
	u.mu.Unlock()
	c.Close()
}

func (u *udpUpstream) close() {
	u.mu.Lock()
	u.closed = true
	c := u.conn
	u.conn = nil
	u.mu.Unlock()
	if c != nil {
		c.Close()
	}
	if u.tcp != nil {
		u.tcp.close()
	}
}

var _ exchanger = (*udpUpstream)(nil)
var _ exchanger = (*tcpUpstream)(nil)
