// Package httpconnect is the client side of an HTTP CONNECT tunnel
// (RFC 9110 §9.3.6, message syntax of RFC 9112): the request that asks a
// proxy for a tunnel to host:port, with Basic credentials (RFC 7617), and the
// head of the proxy's response, nothing else.
//
// Like package socks5, it takes a connection the caller has dialed (and
// wrapped in TLS, for a proxy spoken to over https) and runs the exchange on
// it; after a 2xx answer the connection carries the target's bytes. The
// response head is read byte-exactly: never a byte past its empty line, so
// what the target sends at once stays in the connection for the caller, and
// there is no buffered remainder to hand over. Every read asks for at most
// the bytes that cannot yet complete the head (4 when the bytes read so far
// do not end in a part of CRLF CRLF), which costs a few reads per response
// and keeps the connection a plain *net.TCPConn for the relay. The head is
// bounded: [MaxResponseLen] bytes, [MaxHeaderLines] header lines; a silent
// proxy is bounded by the deadline the caller sets on the connection.
//
// The parser is strict, because a proxy's answer decides whether a flow is
// carried: lines end in CRLF (a bare CR or LF is refused, RFC 9112 §2.2
// allows either choice), no obsolete line folding, no whitespace before a
// field's colon, field names are tokens, values hold no control bytes but
// HTAB, the version is HTTP/1.x. A 2xx status means the tunnel is open; its
// header fields are returned and otherwise ignored (RFC 9110 §9.3.6: a
// client ignores Content-Length and Transfer-Encoding in a 2xx answer to
// CONNECT). Any other status is a *[StatusError].
//
// What it is not: not a dialer (no net.Dial, no DNS, no TLS, no timeouts of
// its own), not a general HTTP client (no bodies, no redirects, no proxy
// authentication schemes other than Basic, no interim 1xx answers, which are
// refused like any non-2xx status). The package has no state and starts no
// goroutine; a [Client] is a plain value safe for concurrent use.
package httpconnect

import (
	"errors"
	"fmt"
	"net/textproto"
)

// Limits of what the parser accepts from a proxy.
const (
	// MaxResponseLen bounds the response head: status line, header lines
	// and the empty line. Real answers to CONNECT are under 1 KiB (a 407
	// with its Proxy-Authenticate and Via fields included).
	MaxResponseLen = 16 << 10
	// MaxHeaderLines bounds the header lines after the status line.
	MaxHeaderLines = 100
	// MaxCredentialLen is the longest username or password this package
	// sends: HTTP sets no limit; this one keeps the request small.
	MaxCredentialLen = 255
	// maxHostLen is the longest host name in a target, as in DNS and
	// SOCKS5.
	maxHostLen = 255
	// maxReasonShown bounds the reason phrase quoted in a StatusError.
	maxReasonShown = 64
)

// Sentinel errors, for errors.Is. They are never modified.
var (
	// ErrAuthRequired is wrapped by the *StatusError of a 407 answer when
	// the request carried no credentials: the proxy wants some.
	ErrAuthRequired = errors.New("proxy requires authentication")
	// ErrAuthFailed is wrapped by the *StatusError of a 407 answer to a
	// request that carried credentials: the proxy refused them.
	ErrAuthFailed = errors.New("credentials rejected")
)

// Response is the head of a proxy's answer to CONNECT.
type Response struct {
	// Proto is the version of the status line: "HTTP/1.1" or "HTTP/1.0".
	Proto string
	// StatusCode is the three-digit status, 100 to 599.
	StatusCode int
	// Reason is the reason phrase as the proxy sent it, possibly empty.
	Reason string
	// Header holds the header fields with canonical names
	// (textproto.CanonicalMIMEHeaderKey), values with surrounding
	// whitespace removed, in the order received. It is nil when there are
	// none.
	Header textproto.MIMEHeader
}

// StatusError is an answer to CONNECT whose status is not 2xx: the proxy
// did not open the tunnel. Its Error names the code and the reason phrase
// (quoted, cut to 64 bytes). For 407 it wraps [ErrAuthRequired] or
// [ErrAuthFailed].
type StatusError struct {
	Code   int
	Reason string
	auth   error // ErrAuthRequired, ErrAuthFailed or nil
}

// Error returns e.g. `proxy answered 403 "Forbidden"`.
func (e *StatusError) Error() string {
	r := e.Reason
	if len(r) > maxReasonShown {
		r = r[:maxReasonShown] + "..."
	}
	s := fmt.Sprintf("proxy answered %d %q", e.Code, r)
	if e.auth != nil {
		s += ": " + e.auth.Error()
	}
	return s
}

// Unwrap returns ErrAuthRequired or ErrAuthFailed for a 407, else nil.
func (e *StatusError) Unwrap() error { return e.auth }
