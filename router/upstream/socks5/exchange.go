package socks5

import (
	"errors"
	"fmt"
	"io"
)

// Exchange is the client side of one handshake (the method selection, the credentials when
// the Client has them, one request and its reply) without any I/O: the caller moves the
// bytes, the Exchange says what to send and parses what comes back. It is what an event loop
// on a non-blocking socket drives, and what [Client.Handshake] and [Client.Associate] drive
// over a blocking connection: one implementation of the wire rules, the same errors.
//
// The conversation:
//
//	Start                    the first bytes to send: the greeting, or with Client.Pipeline
//	                         the greeting, the credentials and the request at once
//	Feed(in)                 the server's bytes as they come (in holds every byte not yet
//	                         consumed): Feed consumes whole messages only, never a byte of
//	                         what follows the reply, and returns what to send next in lock
//	                         step (the credentials, then the request); Done once the reply
//	                         said success
//	Cut(in, err)             the server's stream ended (io.EOF) or failed before the reply:
//	                         the error, as Handshake would have returned it
//	WriteFailed(err)         sending the last bytes failed: the error, naming the step
//
// An error from Feed is final: the reply refused (a *[ReplyError]), a method or credentials
// refused ([ErrNoAcceptableMethods], [ErrAuthFailed]), or a protocol error; the errors name
// the failing step like Handshake's and never contain the password. A reader that must not
// read past the reply asks Need how many bytes the next message still needs.
//
// The zero Exchange is not started; an Exchange is used by one goroutine at a time, and
// keeps c.Auth (read only) until it ends.
type Exchange struct {
	auth     *Auth
	dst      Addr
	step     string // the request's name in errors: "socks5 connect" or "socks5 associate"
	cmd      byte
	method   byte
	pipeline bool
	state    xstate // what the Exchange waits for
	sent     xstate // the message the last bytes to send end with, for write errors
	bound    Addr
}

// xstate is where an Exchange stands: the server message it waits for, or its end.
type xstate uint8

const (
	xIdle   xstate = iota // not started
	xMethod               // the method selection
	xAuth                 // the credentials' status
	xReply                // the reply
	xDone                 // the reply said success
	xFailed               // Feed returned an error
)

// Start begins an Exchange for a CONNECT to dst and appends the first bytes to send to out
// (greeting, credentials and request at once when c.Pipeline is set; the greeting alone
// otherwise). dst and c.Auth are checked before anything is appended; the errors are
// Handshake's ("socks5 connect: invalid destination: ...", "socks5 auth: ...").
func (x *Exchange) Start(c *Client, dst Addr, out []byte) ([]byte, error) {
	return x.start(c, CmdConnect, "socks5 connect", dst, out)
}

func (x *Exchange) start(c *Client, cmd byte, step string, dst Addr, out []byte) ([]byte, error) {
	if err := dst.check(); err != nil {
		return out, fmt.Errorf("%s: invalid destination: %w", step, err)
	}
	*x = Exchange{auth: c.Auth, dst: dst, step: step, cmd: cmd, method: MethodNoAuth, pipeline: c.Pipeline, state: xMethod, sent: xMethod}
	if c.Auth != nil {
		if err := checkAuth(c.Auth); err != nil {
			*x = Exchange{}
			return out, fmt.Errorf("socks5 auth: %w", err)
		}
		x.method = MethodUserPass
	}
	out = append(out, Version, 1, x.method)
	if x.pipeline {
		if x.auth != nil {
			out = appendUserPass(out, x.auth)
		}
		out = x.appendRequest(out)
	}
	return out, nil
}

// appendRequest appends the request: VER, CMD, RSV, DST.
func (x *Exchange) appendRequest(out []byte) []byte {
	out = append(out, Version, x.cmd, 0x00)
	return appendAddr(out, x.dst)
}

// Done reports whether the reply came and said success; Bound then holds its address.
func (x *Exchange) Done() bool { return x.state == xDone }

// Bound is the reply's BND.ADDR and BND.PORT, once Done.
func (x *Exchange) Bound() Addr { return x.bound }

// Need returns how many more bytes the next server message needs, given in, the bytes not yet
// consumed: 0 when in holds a whole message (or enough for Feed to report an error), or when
// the Exchange waits for nothing. Reading exactly that many never reads past the reply.
func (x *Exchange) Need(in []byte) int {
	switch x.state {
	case xMethod, xAuth:
		return max(0, 2-len(in))
	case xReply:
		if len(in) < replyHeadLen {
			return replyHeadLen - len(in)
		}
		rest, err := replyRest(in)
		if err != nil {
			return 0
		}
		return max(0, replyHeadLen+rest-len(in))
	}
	return 0
}

// Feed consumes the whole server messages at the start of in, and returns how many bytes it
// consumed and next: out with what to send now appended (in lock step, the credentials
// after the method selection, the request after those; nothing when pipelined). It stops
// after the reply: bytes after it are the destination's and stay unconsumed. An error is
// final (see Exchange); after it, or once Done, Feed consumes nothing.
func (x *Exchange) Feed(in, out []byte) (n int, next []byte, err error) {
	next = out
	for {
		b := in[n:]
		switch x.state {
		case xMethod:
			if len(b) < 2 {
				return n, next, nil
			}
			n += 2
			if err := checkMethod(b[:2], x.method); err != nil {
				x.state = xFailed
				return n, next, err
			}
			if x.auth != nil {
				x.state = xAuth
				if !x.pipeline {
					next, x.sent = appendUserPass(next, x.auth), xAuth
				}
				continue
			}
			x.state = xReply
			if !x.pipeline {
				next, x.sent = x.appendRequest(next), xReply
			}
		case xAuth:
			if len(b) < 2 {
				return n, next, nil
			}
			n += 2
			if err := checkAuthStatus(b[:2], x.auth.Username); err != nil {
				x.state = xFailed
				return n, next, err
			}
			x.state = xReply
			if !x.pipeline {
				next, x.sent = x.appendRequest(next), xReply
			}
		case xReply:
			rep, m, err := ParseReply(b)
			n += m
			if err != nil {
				x.state = xFailed
				return n, next, fmt.Errorf("%s: %w", x.step, err)
			}
			if m == 0 {
				return n, next, nil
			}
			x.bound, x.state = rep.Bound, xDone
			return n, next, nil
		default:
			return n, next, nil
		}
	}
}

// Cut returns the error of an Exchange whose server stream ended or failed with in, the
// bytes Feed left unconsumed (less than a message), still there: err is io.EOF at the end of
// the stream, or the read's error. The error is Handshake's: it wraps io.EOF when nothing of
// the message came, io.ErrUnexpectedEOF when part of it did, and err otherwise.
func (x *Exchange) Cut(in []byte, err error) error {
	if errors.Is(err, io.EOF) && len(in) > 0 {
		err = io.ErrUnexpectedEOF // what io.ReadFull says of a message cut short
	}
	switch x.state {
	case xMethod:
		return fmt.Errorf("socks5 greeting: read method selection: %w", err)
	case xAuth:
		return fmt.Errorf("socks5 auth: read status: %w", err)
	case xReply:
		if len(in) >= 1 && in[0] != Version {
			return fmt.Errorf("%s: reply version 0x%02x, want 0x%02x", x.step, in[0], Version)
		}
		var code byte
		if len(in) >= 2 {
			code = in[1]
		}
		return fmt.Errorf("%s: %w", x.step, replyFailed(code, fmt.Errorf("read reply: %w", err)))
	case xIdle:
		return fmt.Errorf("socks5: exchange not started: %w", err)
	}
	return fmt.Errorf("%s: read after the reply: %w", x.step, err)
}

// WriteFailed returns the error of an Exchange whose last bytes to send could not be sent.
func (x *Exchange) WriteFailed(err error) error {
	switch x.sent {
	case xAuth:
		return fmt.Errorf("socks5 auth: write: %w", err)
	case xReply:
		return fmt.Errorf("%s: write: %w", x.step, err)
	}
	return fmt.Errorf("socks5 greeting: write: %w", err)
}

// checkMethod checks the server's METHOD selection (RFC 1928 §3), b (2 bytes): it must be
// the offered method.
func checkMethod(b []byte, offered byte) error {
	if b[0] != Version {
		return fmt.Errorf("socks5 greeting: server version 0x%02x, want 0x%02x", b[0], Version)
	}
	switch b[1] {
	case offered:
		return nil
	case MethodNoAcceptable:
		return fmt.Errorf("socks5 greeting: %w (offered only %s)", ErrNoAcceptableMethods, methodName(offered))
	default:
		return fmt.Errorf("socks5 greeting: server chose method 0x%02x, but only %s (0x%02x) was offered",
			b[1], methodName(offered), offered)
	}
}

// checkAuthStatus checks the RFC 1929 §2 response (VER, STATUS), b (2 bytes). The error names
// the user, never the password.
func checkAuthStatus(b []byte, user string) error {
	if b[0] != UserPassVersion {
		return fmt.Errorf("socks5 auth: reply version 0x%02x, want 0x%02x", b[0], UserPassVersion)
	}
	if b[1] != UserPassSuccess {
		return fmt.Errorf("socks5 auth: %w for user %q (status 0x%02x)", ErrAuthFailed, user, b[1])
	}
	return nil
}

// ParseReply parses the reply (RFC 1928 §6) at the start of b without reading anything: it
// returns the reply and its length n, or n = 0 and no error when b holds less than a whole
// reply (more is needed; nothing after the reply is looked at). Its verdicts are
// [ReadReply]'s on the same bytes: a wrong VER, a malformed address and a failure code are
// the same errors, and with a failure code and a malformed rest the Reply holds the Code. n
// is the reply's length when the error is nil or a bare *[ReplyError] (a whole reply), 0
// for any other error. It allocates only for a host name in BND.ADDR, and for an error.
func ParseReply(b []byte) (rep Reply, n int, err error) {
	if len(b) >= 1 && b[0] != Version {
		return Reply{}, 0, fmt.Errorf("reply version 0x%02x, want 0x%02x", b[0], Version)
	}
	if len(b) < replyHeadLen {
		return Reply{}, 0, nil
	}
	rest, err := replyRest(b)
	if err != nil {
		rep, err := replyCode(b[1], err)
		return rep, 0, err
	}
	end := replyHeadLen + rest
	if len(b) < end {
		return Reply{}, 0, nil
	}
	rep = Reply{Code: b[1], Bound: boundAddr(b[:end])}
	if rep.Code != RepSucceeded {
		return rep, end, &ReplyError{Code: rep.Code}
	}
	return rep, end, nil
}

// replyRest returns how many bytes of the reply follow its head (replyHeadLen bytes of b), or
// why the head is malformed.
func replyRest(head []byte) (int, error) {
	switch atyp := head[3]; atyp {
	case AtypIPv4:
		return 4 + 2 - 3, nil
	case AtypIPv6:
		return 16 + 2 - 3, nil
	case AtypDomain:
		if head[4] == 0 {
			return 0, errors.New("reply has an empty host name")
		}
		return int(head[4]), nil
	default:
		return 0, fmt.Errorf("reply address type 0x%02x unknown", atyp)
	}
}

// replyCode is the verdict on a reply that cannot be read to its end, with code its REP (0
// when not read): with a failure code, the Reply keeps it and the error wraps both.
func replyCode(code byte, cause error) (Reply, error) {
	if code != RepSucceeded {
		return Reply{Code: code}, fmt.Errorf("%w; %w", &ReplyError{Code: code}, cause)
	}
	return Reply{}, cause
}

// replyFailed is replyCode's error.
func replyFailed(code byte, cause error) error {
	_, err := replyCode(code, cause)
	return err
}
