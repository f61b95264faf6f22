// Package httphead reads an HTTP/1.x request head off a connection the router relays, for the
// two places that judge requests one by one: the model forwards (router/modelfwd) and the
// brokered destinations (router). Each keeps its own limit (br's buffer) and answers; the
// reading, and what makes a head unreadable, are decided here once.
package httphead

import (
	"bufio"
	"errors"
	"net/http"
	"strconv"

	"github.com/agentcage/router/rules/modelapi"
	"golang.org/x/net/http/httpguts"
)

// Read reads the next request from br. Its head must end within br's buffer (br.Size():
// make br with bufio.NewReaderSize at the limit), frame its body one way only
// (modelapi.Framing), parse (http.ReadRequest) as HTTP/1.x, and carry a well-formed Host
// field or none. A request refused unparsed returns why (a phrase for the answer's body) and
// a nil err; the caller answers and ends the connection. err is the connection's end (EOF,
// a deadline, a reset), before a request.
func Read(br *bufio.Reader) (req *http.Request, why string, err error) {
	head, err := peek(br)
	if err != nil {
		return nil, "", err
	}
	if head == nil {
		return nil, "the request head is larger than " + strconv.Itoa(br.Size()) + " bytes", nil
	}
	if why := modelapi.Framing(head); why != "" {
		return nil, why, nil
	}
	req, err = http.ReadRequest(br)
	// What http.Server would refuse before its handler (RFC 9112 sections 2.3, 3.2): a
	// second Host field ReadRequest has refused, and moved the one into req.Host.
	switch {
	case err != nil:
		return nil, "a malformed request", nil
	case req.ProtoMajor != 1:
		return nil, "an HTTP version other than 1.x", nil
	case req.Host != "" && !httpguts.ValidHostHeader(req.Host):
		return nil, "a malformed Host header", nil
	}
	return req, "", nil
}

// peek returns the request head at the start of br (through the blank line that ends it),
// without consuming it; nil (and no error) when br's buffer fills before the head ends.
func peek(br *bufio.Reader) ([]byte, error) {
	for {
		n := br.Buffered()
		if n > 0 {
			b, _ := br.Peek(n)
			if end := modelapi.HeadEnd(b); end >= 0 {
				return b[:end], nil
			}
			if n >= br.Size() {
				return nil, nil
			}
		}
		if _, err := br.Peek(n + 1); err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, nil
			}
			return nil, err
		}
	}
}
