package httpconnect

import (
	"fmt"
	"io"
	"strings"
)

// Client runs the client side of a CONNECT exchange on connections the
// caller has dialed. It holds configuration only: the zero Client sends no
// credentials. A Client is not modified by Handshake and is safe for
// concurrent use.
type Client struct {
	// Auth, when not nil, is sent as Proxy-Authorization: Basic with every
	// request, without waiting for a 407 challenge (the proxy is known to
	// want it, and a challenge would cost a round trip and a new
	// connection on most proxies). Handshake reads *Auth and never
	// modifies it.
	Auth *Auth
}

// Handshake writes a CONNECT request for host:port (see [AppendRequest]) in
// one write, then reads the head of the proxy's answer (see
// [ReadResponse]). On a 2xx answer it returns the Response and a nil error,
// and conn carries the target's bytes: nothing past the head was read, so
// the target's first bytes are still in conn for the relay.
//
// Any other status returns the Response and an error wrapping a
// *[StatusError] (errors.As; a 407 wraps [ErrAuthRequired] without
// credentials, [ErrAuthFailed] with). Other errors come with a zero
// Response and name the step: "http connect: invalid target: ...",
// "http connect: write: ...", "http connect: read response: ...",
// "http connect: response: ...". host, port and c.Auth are checked before
// anything is written. No error contains the password or its Base64 form: a
// reason phrase or field value that echoes either is replaced.
//
// Timing is the caller's: Handshake sets no deadline and starts no
// goroutine. After an error, conn is in no usable state: close it.
func (c *Client) Handshake(conn io.ReadWriter, host string, port uint16) (Response, error) {
	req, err := AppendRequest(make([]byte, 0, 128), host, port, c.Auth)
	if err != nil {
		return Response{}, fmt.Errorf("http connect: %w", err)
	}
	if _, err := conn.Write(req); err != nil {
		return Response{}, fmt.Errorf("http connect: write: %w", err)
	}
	resp, err := ReadResponse(conn)
	if err != nil {
		return Response{}, fmt.Errorf("http connect: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	se := &StatusError{Code: resp.StatusCode, Reason: resp.Reason}
	if c.Auth != nil {
		// A proxy that echoes the request must not put the secret in a log.
		for _, secret := range []string{c.Auth.Password, token(*c.Auth)} {
			if strings.Contains(se.Reason, secret) {
				se.Reason = redacted
			}
		}
		for k, vs := range resp.Header {
			for i, v := range vs {
				if strings.Contains(v, c.Auth.Password) || strings.Contains(v, token(*c.Auth)) {
					resp.Header[k][i] = redacted
				}
			}
		}
		resp.Reason = se.Reason
	}
	if resp.StatusCode == 407 {
		se.auth = ErrAuthRequired
		if c.Auth != nil {
			se.auth = ErrAuthFailed
		}
	}
	return resp, fmt.Errorf("http connect: %w", se)
}
