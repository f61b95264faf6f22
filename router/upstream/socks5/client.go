package socks5

import (
	"io"
	"net/netip"
)

// Client runs the client side of a SOCKS5 handshake on connections the caller
// has dialed. It holds configuration only: the zero Client offers no
// authentication and does not pipeline. A Client is not modified by
// Handshake and is safe for concurrent use.
type Client struct {
	// Auth, when not nil, are the RFC 1929 credentials. Then the greeting
	// offers username/password ONLY, never also "no authentication": a proxy
	// that cannot check the password answers "no acceptable methods" and the
	// handshake fails, instead of silently running without the credentials
	// the configuration asked for (and a proxy that picks "no
	// authentication" anyway is a protocol error). When nil, the greeting
	// offers "no authentication" only. Handshake reads *Auth and never
	// modifies it.
	Auth *Auth

	// Pipeline sends the greeting, the credentials and the CONNECT request
	// in one write, without waiting for the server's answers, then reads the
	// answers in order. It saves one round trip (two with Auth) to the
	// proxy. Offering exactly one method makes the server's only valid
	// answers that method or "none", so what is sent early is never wrong;
	// it does rely on the server reading its input as a stream (RFC 1928
	// describes the exchange in lock step and neither allows nor forbids
	// early data). Servers that parse with buffered exact reads, like
	// go-socks5, accept it. Without Pipeline, each message waits for the
	// answer to the previous one.
	Pipeline bool
}

// Handshake negotiates a method, authenticates when c.Auth is set, and asks
// the server to CONNECT to dst (RFC 1928 §3, §4, §6; RFC 1929). On success
// it returns the reply's BND.ADDR/BND.PORT (often 0.0.0.0:0, returned as is)
// and conn carries the target's bytes: Handshake reads exactly the server's
// messages and not a byte more, so the target's first bytes (an SSH banner,
// say) are still unread in conn for the relay. It does not buffer; conn needs
// no buffering either.
//
// Timing is the caller's: Handshake sets no deadline and starts no
// goroutine, so the caller sets a deadline on the connection (for a
// net.Conn, SetDeadline before the call, and clears it after) or a silent
// server blocks Handshake for good.
//
// dst and c.Auth are checked before anything is written; then errors name
// the failing step: "socks5 greeting: ...", "socks5 auth: ...",
// "socks5 connect: ...". A refused request wraps a *[ReplyError] with the
// REP code (errors.As); a rejected method selection wraps
// [ErrNoAcceptableMethods], rejected credentials [ErrAuthFailed]. No error
// contains the password. After an error, conn is in no usable state: close
// it.
//
// Handshake makes one allocation (a buffer for all messages, because bytes
// passed to an io.Reader or io.Writer escape to the heap), plus the host
// name when the reply binds a name.
func (c *Client) Handshake(conn io.ReadWriter, dst Addr) (bound Addr, err error) {
	return c.request(conn, CmdConnect, "socks5 connect", dst)
}

// Associate is [Client.Handshake] with a UDP ASSOCIATE request (RFC 1928
// §7) in place of CONNECT: the same method negotiation and credentials, the
// same pipelining (greeting, credentials and request in one write when
// c.Pipeline is set), the same byte-exact reads, deadlines and errors, with
// "socks5 associate: ..." naming the last step.
//
// from is the address the client will send its datagrams from, if it knows
// it; the zero Addr sends 0.0.0.0:0, which RFC 1928 prescribes for a client
// that does not know its address yet (behind a NAT it never does), and
// which servers take as "any source". On success it returns the relay: the
// BND.ADDR/BND.PORT where the server takes the client's datagrams, as the
// server sent it. Servers that listen on every interface often send an
// unspecified address (0.0.0.0 or ::): the caller then sends to the server's
// own address at BND.PORT.
//
// The association lives as long as conn: the server ends it when conn
// closes, so the caller keeps conn open, reads nothing from it (the server
// sends nothing more) and closes it to end the association.
func (c *Client) Associate(conn io.ReadWriter, from Addr) (relay Addr, err error) {
	if from == (Addr{}) {
		from = Addr{IP: netip.IPv4Unspecified()}
	}
	return c.request(conn, CmdUDPAssociate, "socks5 associate", from)
}

// request runs a whole handshake over conn with an [Exchange]: greeting, credentials, the
// request cmd for dst, the reply. step names the request in errors. It reads exactly the
// bytes each message still needs (Exchange.Need), so never past the reply.
func (c *Client) request(conn io.ReadWriter, cmd byte, step string, dst Addr) (bound Addr, err error) {
	// One buffer for every message: what is written first, what is read after it. The
	// written part bounds the pipelined write and each message in lock step (a request is
	// no longer than MaxReplyLen); the read part holds one reply.
	const greetingLen = 3
	out := greetingLen + MaxReplyLen
	if c.Auth != nil {
		out += 3 + len(c.Auth.Username) + len(c.Auth.Password)
	}
	buf := make([]byte, out+MaxReplyLen)
	var x Exchange
	first, err := x.start(c, cmd, step, dst, buf[:0:out])
	if err != nil {
		return Addr{}, err
	}
	if _, err := conn.Write(first); err != nil {
		return Addr{}, x.WriteFailed(err)
	}
	in, have := buf[out:], 0
	for !x.Done() {
		if need := x.Need(in[:have]); need > 0 {
			n, err := io.ReadFull(conn, in[have:have+need])
			have += n
			if err != nil {
				return Addr{}, x.Cut(in[:have], err)
			}
			continue
		}
		n, next, err := x.Feed(in[:have], buf[:0:out])
		if err != nil {
			return Addr{}, err
		}
		have = copy(in, in[n:have])
		if len(next) > 0 {
			if _, err := conn.Write(next); err != nil {
				return Addr{}, x.WriteFailed(err)
			}
		}
	}
	return x.Bound(), nil
}

// methodName names the methods Handshake offers, for errors.
func methodName(m byte) string {
	if m == MethodUserPass {
		return "username/password"
	}
	return "no authentication"
}
