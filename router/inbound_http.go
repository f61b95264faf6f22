package router

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/agentcage/router/rules/policy"
)

// The HTTP inbound takes one CONNECT request per connection (RFC 9110 §9.3.6), read by
// net/http's request parser (http.ReadRequest) from at most inboundHeadMax bytes: the
// request target is host:port in authority form, IPv6 in brackets. Its answers:
//
//	200 Connection established   the tunnel is open; the connection carries its bytes
//	400 Bad Request              the request or its target cannot be read or is refused
//	403 Forbidden                the rules refuse the flow
//	405 Method Not Allowed       any method but CONNECT (no plain-HTTP proxying)
//	431 Request Header Fields Too Large   the head is over inboundHeadMax
//	502 Bad Gateway, 504 Gateway Timeout  connecting failed, or took too long
//
// Every answer but 200 ends the connection. Bytes the client sent right behind its request
// (a TLS ClientHello, without waiting for the 200) go to the destination first.

// serveHTTP reads c's request and sets up its flow; the error says why there is none.
func (s *inboundServer) serveHTTP(c *inboundConn) error {
	lr := &io.LimitedReader{R: c.TCPConn, N: inboundHeadMax}
	br := bufio.NewReaderSize(lr, earlyMax)
	rq, status, err := readConnect(br)
	if err != nil {
		if lr.N == 0 {
			status = http.StatusRequestHeaderFieldsTooLarge
		}
		writeStatus(c.TCPConn, status)
		return err
	}
	if n := br.Buffered(); n > 0 {
		rq.early, _ = br.Peek(n)
	}
	s.flow(c, rq, httpReply{c.TCPConn})
	return nil
}

// readConnect reads one request from br and returns the destination of a CONNECT; on error,
// the status to answer with.
func readConnect(br *bufio.Reader) (inboundRequest, int, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return inboundRequest{}, http.StatusBadRequest, fmt.Errorf("read request: %w", err)
	}
	if req.Method != http.MethodConnect {
		return inboundRequest{}, http.StatusMethodNotAllowed, fmt.Errorf("method %.16q: only CONNECT is served", req.Method)
	}
	// ReadRequest takes a CONNECT target that does not start with "/" as an authority.
	if req.URL == nil || req.URL.Host == "" || req.URL.Path != "" || req.URL.User != nil || strings.HasPrefix(req.RequestURI, "/") {
		return inboundRequest{}, http.StatusBadRequest, fmt.Errorf("CONNECT target %.64q is not host:port", req.RequestURI)
	}
	host, portText, err := net.SplitHostPort(req.URL.Host)
	if err != nil {
		return inboundRequest{}, http.StatusBadRequest, fmt.Errorf("CONNECT target %.64q: %w", req.URL.Host, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return inboundRequest{}, http.StatusBadRequest, fmt.Errorf("CONNECT target %.64q: bad port", req.URL.Host)
	}
	rq, err := target(host, uint16(port))
	if err != nil {
		return inboundRequest{}, http.StatusBadRequest, fmt.Errorf("CONNECT target: %w", err)
	}
	return rq, 0, nil
}

// writeStatus answers with status and a short text, and asks to close.
func writeStatus(c net.Conn, status int) {
	body := http.StatusText(status) + "\n"
	extra := ""
	if status == http.StatusMethodNotAllowed {
		extra = "Allow: CONNECT\r\n"
		body = "this proxy opens tunnels (CONNECT) only: use it for https:// URLs, or with curl --proxytunnel\n"
	}
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\n%sContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), extra, len(body), body)
}

// httpReply answers a CONNECT.
type httpReply struct{ c net.Conn }

// refused answers 403 with what was refused and why, as the transparent path does.
func (h httpReply) refused(f *FlowRecord, d policy.Decision) { h.c.Write(refusal403(f, d)) }

func (h httpReply) ok() error {
	_, err := io.WriteString(h.c, "HTTP/1.1 200 Connection established\r\n\r\n")
	return err
}

func (h httpReply) fail(err error) {
	switch {
	case err == nil:
		writeStatus(h.c, http.StatusForbidden)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		writeStatus(h.c, http.StatusGatewayTimeout)
	default:
		writeStatus(h.c, http.StatusBadGateway)
	}
}
