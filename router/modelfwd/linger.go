package modelfwd

import (
	"context"
	"io"
	"net"
	"time"
)

// A connection the router ends after an answer may still carry bytes the guest sent and
// the router never read: the body of a request refused before its body (declared over
// max_body, cut at max_body, an unexpected Expect), or a pipelined request after a
// "Connection: close". Closing a TCP socket whose receive queue is not empty sends a reset
// (RFC 9293 section 3.6.1), and a reset can cut the guest's own write short or reach it
// before it reads the answer: the refusal, written and sent, would then look like a network
// fault. So the router ends such a connection the way RFC 9112 section 9.6 asks of a server:
// it half-closes (the answer, then FIN), reads and discards what the guest still sends until
// the guest closes its side, and only then closes. The wait is bounded in bytes and time,
// so a guest that never stops sending, or never closes, gets a reset after lingerMax bytes
// or lingerTimeout.
const (
	lingerMax     = 64 << 20
	lingerTimeout = 5 * time.Second
)

// lingerClose half-closes c, discards from r (the connection's buffered reader) until the
// peer's end of stream, lingerMax bytes, lingerTimeout or ctx's end, and closes c. It
// returns the bytes discarded.
func lingerClose(ctx context.Context, c *net.TCPConn, r io.Reader) int64 {
	defer c.Close()
	if err := c.CloseWrite(); err != nil {
		return 0
	}
	c.SetReadDeadline(time.Now().Add(lingerTimeout))
	if ctx.Err() != nil {
		return 0 // a stopping router does not wait (its deadline may have been set before ours)
	}
	n, _ := io.CopyN(io.Discard, r, lingerMax)
	return n
}
