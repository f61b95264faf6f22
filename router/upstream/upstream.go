// Package upstream is what the router sends proxied flows through: a named
// proxy ([proxy.NAME]) behind one small interface, [Upstream], with a
// SOCKS5 implementation (TCP by CONNECT, UDP by UDP ASSOCIATE) and an HTTP
// CONNECT implementation (plain or over TLS, TCP only); the health of each
// upstream ([Tracked]); and ordered failover between upstreams ([Group]).
//
// The wire protocols live in packages socks5 and httpconnect; this package
// dials, resolves, times and classifies. Every connection it opens goes
// through the dial function given in [Options] (the router's own dialer,
// whose sockets capture never takes back), and the proxy's host name is
// looked up with the resolve function given there (which must not go
// through capture either). Nothing here ever connects to a destination
// directly: a flow that no upstream carries fails, and a datagram that no
// association carries is not sent.
//
// What an error says about the upstream: every failed Connect or Associate
// returns an *[Error]. Its Refused field is true when the proxy answered
// properly that it will not or cannot reach the destination; the proxy
// itself works, so its health counts it up and a [Group] tries no other
// member. Those answers to a CONNECT are SOCKS5 REP X'02' to X'08' (not
// allowed, network or host unreachable, connection refused, TTL expired,
// and the command or address type not supported: a guest chooses the
// destination, and an IPv6 literal gets X'08' from a proxy without IPv6),
// SOCKS4 91, and HTTP 403 and every 5xx; to a UDP ASSOCIATE, whose request
// names no destination, X'02' to X'06'. Everything else (the proxy does not
// answer or cannot be dialed, TLS fails, credentials are refused, a general
// failure, a protocol error, a timeout) counts against the upstream: only
// failures to reach or speak to the proxy mark it down, so no guest can
// move the others to a failover list's backup on purpose. A flow cannot tell a dead destination from a proxy
// whose own uplink is dead; the periodic probe can, because its target is
// known to work, so a probe counts every failure against the upstream.
//
// A caller with an event loop of its own drives a SOCKS5 CONNECT itself, on
// a non-blocking socket, with a [Handshake] from [Tracked.Begin]: the same
// wire rules, errors and health as Connect, with no goroutine held.
//
// The package keeps no global state: two routers can live in one process.
package upstream

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/agentcage/router/router/upstream/socks5"
)

// Addr is a destination: a host name (sent to the proxy unresolved) or an
// IP, with a port. See socks5.Addr for the rules; a name wins over an IP
// when both are set.
type Addr = socks5.Addr

// Upstream is a proxy that flows go through. Implementations are safe for
// concurrent use.
type Upstream interface {
	// Name is the upstream's name in the configuration, for logs and
	// status; a [Group]'s is its members' names joined by ",".
	Name() string

	// Connect opens a TCP tunnel to dst through the upstream and returns
	// the connection, which then carries the destination's bytes; nothing
	// the destination sent has been read from it. early, when not empty,
	// holds the client's first bytes: Connect delivers them, in the same
	// write as the request when the upstream pipelines, otherwise right
	// after the proxy's success answer. Connect does not keep early.
	//
	// ctx bounds the whole setup (dial, TLS, handshake): its deadline is
	// set on the connection and its cancellation aborts the exchange; the
	// returned connection has no deadline and no tie to ctx. The
	// connection is a *net.TCPConn whenever the transport to the proxy is
	// plain TCP and the dial function returned one (SOCKS5 and "http"
	// upstreams), so the caller can splice it; over TLS ("https") it is a
	// *tls.Conn. The caller owns it and closes it. The error is an
	// *[Error] (for a [Group], it wraps one per member tried).
	Connect(ctx context.Context, dst Addr, early []byte) (net.Conn, error)

	// Associate opens a UDP association through the upstream (SOCKS5 UDP
	// ASSOCIATE). ctx bounds the setup only. The caller owns the
	// association and closes it. Upstreams that cannot carry UDP (HTTP
	// CONNECT) return an *[Error] wrapping [ErrUDPUnsupported] at once.
	Associate(ctx context.Context) (Association, error)
}

// Association is a UDP association: datagrams to and from any number of
// destinations through one proxy relay. It is safe for concurrent use: any
// number of goroutines may send while one reads.
//
// An association ends when its control connection ends (the proxy closed
// it, or it broke) or when Close is called; Done is then closed and Err
// says why. The caller makes a new one when it still has datagrams to
// send; nothing is ever sent any other way.
type Association interface {
	// WriteTo sends p as one datagram to dst through the relay and returns
	// len(p) on success. A host name in dst is given to the proxy
	// unresolved. A datagram that with the relay's header is more than a
	// UDP socket can send is not sent: the error wraps [ErrTooLarge] and
	// the association lives on. After the end it returns Err().
	WriteTo(p []byte, dst Addr) (int, error)

	// ReadFrom reads the next datagram from the relay into p and returns
	// the payload's length and the address it came from (as the proxy
	// reports it: an IP, or the name the datagram was sent to). A datagram
	// is never cut: one whose payload is longer than p is dropped whole, and
	// ReadFrom returns its length, its source and an error wrapping
	// [ErrTooLarge] (the association lives on; the caller counts the drop
	// and reads again). A p of [ReadBufLen] bytes is read in place; a
	// shorter one costs a copy from a buffer of the association's.
	// Datagrams with a malformed header or a FRAG other than zero are
	// dropped (logged at debug level), and ReadFrom waits for the next. It
	// blocks until a datagram comes or the association ends; after the end
	// it returns Err().
	ReadFrom(p []byte) (n int, src Addr, err error)

	// Done is closed when the association has ended.
	Done() <-chan struct{}

	// Err is nil while the association lives. After Close it wraps
	// net.ErrClosed; after the control connection ended it wraps
	// [ErrAssociationLost] and the cause.
	Err() error

	// Close ends the association: the control connection and the UDP
	// socket are closed, blocked calls return. It returns nil, also when
	// called again.
	Close() error
}

// Sentinel errors, for errors.Is. They are never modified.
var (
	// ErrUDPUnsupported is wrapped by Associate on upstreams that cannot
	// carry UDP (HTTP CONNECT).
	ErrUDPUnsupported = errors.New("upstream cannot carry UDP")
	// ErrAssociationLost is wrapped by an Association's Err when its
	// control connection ended: the proxy has dropped the association.
	ErrAssociationLost = errors.New("udp association lost: control connection ended")
)

// Error is a failed Connect or Associate through one upstream.
type Error struct {
	// Upstream is the upstream's name.
	Upstream string
	// Op is "connect" or "associate".
	Op string
	// Dst is the destination of a connect.
	Dst Addr
	// Refused is true when the proxy answered that it would not or could
	// not reach Dst (see the package documentation): the proxy works, no
	// other upstream is tried.
	Refused bool
	// Sent is true when the early bytes may have reached the destination
	// before the failure (pipelined, then the proxy went silent or broke
	// mid-answer): trying another upstream could deliver them twice, so a
	// Group does not.
	Sent bool
	// Err is the cause; its text names the failing step.
	Err error
}

// Error returns e.g. "upstream exit: connect example.com:443: dial proxy
// 192.0.2.1:1080: connection refused".
func (e *Error) Error() string {
	s := "upstream " + e.Upstream + ": " + e.Op
	if e.Op == "connect" {
		s += " " + e.Dst.String()
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// attempts is the error of a Group: one error per member tried, in order.
type attempts []error

func (a attempts) Error() string {
	s := make([]string, len(a))
	for i, e := range a {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func (a attempts) Unwrap() []error { return a }
