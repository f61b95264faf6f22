package modelfwd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// modelClient is the HTTP forwards' client to the model servers on Linux: an
// http.RoundTripper that writes each request and reads its response head on the calling
// goroutine (the forward's handler), over connections it keeps alive per server.
//
// Why not net/http's Transport: it runs a reader and a writer goroutine per connection and
// hands every request and response across them, two goroutine wake-ups on the path to the
// first byte that measured about 40-60 µs p50 on a 2-core host (BenchmarkModelForward),
// most of what the HTTP forward added over the raw pipe. The parsing and writing are still
// net/http's own (http.Request.Write, http.ReadResponse); only the scheduling differs.
//
// What the Transport's idle reader did, noticing that the server closed a kept-alive
// connection, is a non-blocking peek at the socket before reuse (alive). A server that
// closes in the instant between the peek and reading the request (a keep-alive timeout
// racing the guest's next call) costs one retry on a fresh connection, made only when no
// byte of a response arrived and the request's body, if any, was read whole into the retry
// copy (bodies up to retryBody; the forwards pass inference calls only, so a repeat is
// harmless).
//
// Responses stream as the Transport's did: the body is read on demand by the reverse proxy,
// and a cancelled request (the guest gone) ends a read that waits on the server.
type modelClient struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int           // per server
	idleTimeout time.Duration // an idle connection older than this is closed, not reused

	mu   sync.Mutex
	idle map[string][]*modelConn // by host:port, the most recently used last
}

// retryBody bounds the request body kept for a retry on a fresh connection.
const retryBody = 1 << 20

type modelConn struct {
	c     net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	since time.Time // idle since
}

func (m *modelClient) CloseIdleConnections() {
	m.mu.Lock()
	idle := m.idle
	m.idle = nil
	m.mu.Unlock()
	for _, cs := range idle {
		for _, pc := range cs {
			pc.c.Close()
		}
	}
}

// get returns a kept-alive connection to addr that is still open, or nil.
func (m *modelClient) get(addr string) *modelConn {
	for {
		m.mu.Lock()
		cs := m.idle[addr]
		if len(cs) == 0 {
			m.mu.Unlock()
			return nil
		}
		pc := cs[len(cs)-1]
		m.idle[addr] = cs[:len(cs)-1]
		m.mu.Unlock()
		if time.Since(pc.since) < m.idleTimeout && alive(pc.c) {
			return pc
		}
		pc.c.Close()
	}
}

func (m *modelClient) put(addr string, pc *modelConn) {
	pc.since = time.Now()
	m.mu.Lock()
	if m.idle == nil {
		m.idle = map[string][]*modelConn{}
	}
	cs := m.idle[addr]
	var drop *modelConn
	if len(cs) >= m.maxIdle {
		drop, cs = cs[0], cs[1:]
	}
	m.idle[addr] = append(cs, pc)
	m.mu.Unlock()
	if drop != nil {
		drop.c.Close()
	}
}

func (m *modelClient) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("model client: scheme %q: only http", req.URL.Scheme)
	}
	addr := req.URL.Host
	pc := m.get(addr)
	reused := pc != nil
	var copied *retryCopy
	if req.Body != nil && req.Body != http.NoBody {
		// Only a kept connection may be retried: a fresh one's body is not kept (over).
		copied = &retryCopy{r: req.Body, over: !reused}
		req.Body = copied
	}
	resp, err := m.exchange(req, addr, pc)
	if err != nil && reused && errors.Is(err, errNoResponse) && copied.whole() {
		// The kept-alive connection was closed under us before any answer: once more, on a
		// fresh connection.
		if copied != nil {
			req.Body = copied.replay()
		}
		resp, err = m.exchange(req, addr, nil)
	}
	if copied != nil {
		copied.r.Close() // written whole, or given up on
		if err != nil && copied.err != nil {
			// Reading the guest's body failed, not the server: say so, as net/http's
			// Transport does (Request.Write hides the error behind an unexported type).
			return nil, copied.err
		}
	}
	return resp, err
}

// errNoResponse marks a failure before any byte of a response arrived.
var errNoResponse = errors.New("the model server closed the connection before answering")

// exchange writes req on pc (a fresh connection when nil) and reads the response head.
func (m *modelClient) exchange(req *http.Request, addr string, pc *modelConn) (*http.Response, error) {
	ctx := req.Context()
	if pc == nil {
		c, err := m.dial(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		pc = &modelConn{c: c, br: bufio.NewReaderSize(c, 16<<10), bw: bufio.NewWriterSize(c, 16<<10)}
	}
	// A cancelled request (the guest gone, the router stopping) ends any wait on the server.
	stop := context.AfterFunc(ctx, func() { pc.c.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		pc.c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if err := req.Write(heldWriter{pc.bw}); err != nil {
		return fail(fmt.Errorf("write the request: %w", errors.Join(errNoResponse, err)))
	}
	if err := pc.bw.Flush(); err != nil {
		return fail(fmt.Errorf("write the request: %w", errors.Join(errNoResponse, err)))
	}
	for {
		if _, err := pc.br.Peek(1); err != nil {
			return fail(fmt.Errorf("read the response: %w", errors.Join(errNoResponse, err)))
		}
		resp, err := http.ReadResponse(pc.br, req)
		if err != nil {
			return fail(fmt.Errorf("read the response: %w", err))
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue // 100 Continue and other interim answers: the body went already
		}
		keep := !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
		resp.Body = &modelBody{rc: resp.Body, m: m, addr: addr, pc: pc, stop: stop, keep: keep, eof: resp.Body == http.NoBody}
		return resp, nil
	}
}

// heldWriter is the connection's buffer as http.Request.Write sees it: not a *bufio.Writer,
// so Write does not flush the head before it reads the body. The request then leaves in
// one piece when its body is small, and a body the forward refuses as it reads it
// (checkedBody) leaves nothing of it, head included, on the server when it fits the
// buffer.
type heldWriter struct{ *bufio.Writer }

// modelBody hands the connection back once the response body was read to its end and
// closed, and closes it when the body is closed early.
type modelBody struct {
	rc   io.ReadCloser
	m    *modelClient
	addr string
	pc   *modelConn
	stop func() bool
	keep bool
	eof  bool
	once sync.Once
}

func (b *modelBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *modelBody) Close() error {
	b.once.Do(func() {
		err := b.rc.Close()
		if b.stop() && b.keep && b.eof && err == nil && b.pc.br.Buffered() == 0 {
			b.m.put(b.addr, b.pc)
			return
		}
		b.pc.c.Close()
	})
	return nil
}

// retryCopy reads a request body through, keeping up to retryBody bytes of it for a retry.
type retryCopy struct {
	r    io.ReadCloser
	kept []byte
	over bool // more than retryBody bytes, or no retry possible: nothing kept
	eof  bool
	err  error // the body's own read error (a guest's body over max_body)
}

func (c *retryCopy) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if !c.over {
		if len(c.kept)+n > retryBody {
			c.over, c.kept = true, nil
		} else {
			c.kept = append(c.kept, p[:n]...)
		}
	}
	switch {
	case err == io.EOF:
		c.eof = true
	case err != nil:
		c.err = err
	}
	return n, err
}

// Close is a no-op: the body is closed by RoundTrip once it is no longer needed for a retry.
func (c *retryCopy) Close() error { return nil }

// whole reports whether a retry can send the same body again: no body, or all of it kept.
func (c *retryCopy) whole() bool { return c == nil || (c.eof && !c.over) }

func (c *retryCopy) replay() io.ReadCloser {
	return io.NopCloser(bytes.NewReader(c.kept))
}

// alive reports whether the server has not closed c (nor sent anything unasked): a peek
// that does not wait.
func alive(c net.Conn) bool { return peekConn(c, false) == peekEmpty }

func newModelRoundTripper(dial func(ctx context.Context, network, addr string) (net.Conn, error)) modelRoundTripper {
	return &modelClient{dial: dial, maxIdle: modelIdlePerServer, idleTimeout: modelIdleTimeout}
}
