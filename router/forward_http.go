package router

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/rules/modelapi"
	"github.com/agentcage/router/rules/refusal"
)

// The HTTP forward: a model forward whose API is not "tcp" serves each accepted connection
// with a net/http server and a reverse proxy (httputil.ReverseProxy) to the model server.
// Each request on the connection (keep-alive and pipelined ones alike) is judged by
// modelapi before anything of it reaches the server:
//
//	guest ─► headGate ──► http.Server ──► handler ──► ReverseProxy ──► model server
//	          │ framing      (parses)      │ method, path (modelapi.Check), Upgrade, max_body
//	          └ refused: a synthetic       └ refused: 403 JSON, counted as model-api
//	            request the handler answers
//
// headGate sits between the socket and the server. It reads each request head with
// net/http's own parser (http.ReadRequest) after checking the head's raw bytes for
// ambiguous framing (modelapi.Framing: Content-Length with Transfer-Encoding, two lengths,
// obsolete folding), which net/http would otherwise resolve silently. It then hands the
// server the very same head and the body as net/http framed it (a chunked body
// re-chunked), so the gate and the server can never disagree on where one request ends and
// the next begins. A head the gate refuses becomes a synthetic request the handler answers
// with the refusal, in order after the requests before it; nothing after it is read.
//
// Responses stream: the proxy flushes after every read from the server (FlushInterval -1),
// so server-sent events and NDJSON reach the guest as the model writes them. There is no
// timeout on a response (a model may think for minutes) and none on the body; the idle
// timeout applies between requests.

const (
	// maxModelHead bounds a request head (request line and header fields): the gate's
	// buffer, held per connection.
	maxModelHead = 32 << 10
	// modelHeadTimeout bounds the time to send a request head, once it has begun.
	modelHeadTimeout = 30 * time.Second
)

// modelTransport is the forwards' client to the model servers: connections dialled with
// the router's own dialer (never captured), kept alive and reused, no compression asked
// for (the guest's own Accept-Encoding goes through untouched), no proxy, HTTP/1.1. On
// Linux it is modelClient (modelclient.go), elsewhere net/http's Transport.
func (r *Router) modelTransport() modelRoundTripper {
	r.modelOnce.Do(func() {
		r.model = newModelRoundTripper(func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, r.pol.Load().ConnectTimeout)
			defer cancel()
			return r.dialer.DialContext(ctx, network, addr)
		})
	})
	return r.model
}

// modelRoundTripper is what the forwards need of their client.
type modelRoundTripper interface {
	http.RoundTripper
	CloseIdleConnections()
}

const (
	modelIdlePerServer = 16
	modelIdleTimeout   = 90 * time.Second
)

// copyBufs lends the proxies their buffers for copying response bodies (one per response
// otherwise).
type copyBufs struct{ p sync.Pool }

func (b *copyBufs) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *copyBufs) Put(buf []byte) { b.p.Put(&buf) }

// forwardHTTP serves one connection of an HTTP forward until the guest or the server
// closes it, the idle timeout passes between requests, or ctx is done.
func (r *Router) forwardHTTP(ctx context.Context, c *net.TCPConn, fw Forward, f *FlowRecord, log *slog.Logger) {
	p := r.pol.Load()
	g := &headGate{TCPConn: c, m: &f.bytes, closed: make(chan struct{})}
	g.br = bufio.NewReaderSize(countingReader{c, &f.bytes}, maxModelHead)
	target := &url.URL{Scheme: "http", Host: fw.Connect.String()}
	h := &modelHandler{r: r, fw: fw, f: f, log: log, gate: g, self: c.LocalAddr().String()}
	h.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // the guest's Host, as a raw pipe passed it
		},
		Transport:     r.modelTransport(),
		FlushInterval: -1,
		BufferPool:    &r.modelBufs,
		ErrorHandler:  h.proxyError,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: modelHeadTimeout,
		IdleTimeout:       p.IdleTimeout,
		MaxHeaderBytes:    maxModelHead,
		// OPTIONS * reaches the handler (and is refused) rather than being answered by the
		// server without it: every request the gate passes is one the handler sees.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	r.live.add(f)
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	_ = srv.Serve(&oneConn{c: g, done: make(chan struct{})})
	<-g.closed
	stop()
	f.Up, f.Down = f.bytes.load()
	r.finish(f)
	log.Info("forward", "up", f.Up, "down", f.Down, "requests", h.requests.Load(), "refused", h.refusedN.Load(),
		"duration", time.Since(f.Start).Round(time.Millisecond))
}

// modelHandler judges and proxies the requests of one connection. The server calls it for
// one request at a time, in order.
type modelHandler struct {
	r     *Router
	fw    Forward
	f     *FlowRecord
	log   *slog.Logger
	gate  *headGate
	proxy *httputil.ReverseProxy
	self  string // the address the guest connected to: an absolute-form target must name it

	requests, refusedN atomic.Int64
}

func (h *modelHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h.requests.Add(1)
	if why, synthetic := h.gate.next(); synthetic {
		h.refuse(w, "", "", why, true) // the head was never parsed: no method, no path
		return
	}
	v := h.fw.API.Check(req.Method, req.RequestURI, h.self)
	path := v.Path
	if !v.OK() {
		h.refuse(w, req.Method, req.URL.EscapedPath(), v.Reason, false)
		return
	}
	if req.Header.Get("Upgrade") != "" {
		h.refuse(w, req.Method, path, "a protocol upgrade would end the forward's checks", true)
		return
	}
	if max := h.fw.MaxBody; max > 0 {
		if req.ContentLength > max {
			h.refuse(w, req.Method, path, fmt.Sprintf("the body is larger than the forward's max_body (%d bytes)", max), true)
			return
		}
		req.Body = http.MaxBytesReader(w, req.Body, max)
	}
	req.URL.Path, req.URL.RawPath = path, ""
	h.proxy.ServeHTTP(w, req)
}

// refuse answers 403 with a small JSON error naming the forward and the reason, counts a
// model-api refusal and logs the method and path (never the query, headers or body). With
// end, the connection closes after the answer.
func (h *modelHandler) refuse(w http.ResponseWriter, method, path, why string, end bool) {
	h.refusedN.Add(1)
	request := strings.TrimSpace(method + " " + clip(path, 200))
	if method == "" {
		request = ""
	}
	h.r.book.Add(refusal.ModelAPI, refusal.Event{Src: h.f.Src, Dst: h.fw.Connect, Rule: "forward " + h.fw.Name, Request: request})
	if h.r.refuse.note("forward "+h.fw.Name+": model api", h.f.Src.Addr().String()) {
		h.log.Warn("forward refused a request", "method", clip(method, 32), "path", clip(path, 200), "reason", why)
	}
	if end {
		w.Header().Set("Connection", "close")
	}
	writeJSONError(w, http.StatusForbidden, h.fw.Name, why)
}

// proxyError answers what the proxy could not carry: a body over max_body (413), the model
// server unreachable or failing mid-request (502).
func (h *modelHandler) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		h.refuse(w, req.Method, req.URL.Path, fmt.Sprintf("the body is larger than the forward's max_body (%d bytes)", tooBig.Limit), true)
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the guest went away
	}
	if h.r.refuse.note("forward "+h.fw.Name+": connect failed", h.f.Src.Addr().String()) {
		h.log.Warn("forward failed", "method", req.Method, "path", req.URL.Path, "err", err)
	}
	writeJSONError(w, http.StatusBadGateway, h.fw.Name, "the model server did not answer")
}

// writeJSONError writes {"error": {"message", "type", "forward"}}: the shape OpenAI-style
// clients show their user.
func writeJSONError(w http.ResponseWriter, status int, forward, why string) {
	typ := "model_api_refused"
	msg := "refused by the router's model forward " + strconv.Quote(forward) + ": " + why
	if status == http.StatusBadGateway {
		typ, msg = "model_server_unreachable", "the router's model forward "+strconv.Quote(forward)+": "+why
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"message": msg, "type": typ, "forward": forward, "reason": why}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// clip cuts s to n bytes, for logging what a guest sent.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// headGate is the connection as the HTTP server reads it: see the package comment above.
// The server reads it from one goroutine at a time (its connection reader guarantees
// that); next is called from the handler.
type headGate struct {
	*net.TCPConn
	br *bufio.Reader // over the socket, counting what comes up
	m  *meter

	pending []byte    // bytes to hand the server before reading more: a head, a chunk
	body    io.Reader // the current request's body as net/http framed it; nil between requests
	chunked bool      // body is re-chunked
	buf     []byte    // for reading a chunked body
	done    bool      // a refused head was handed over: EOF after it

	mu      sync.Mutex
	queue   []string // per head handed over, in order: "" for a real one, else the refusal
	closing sync.Once
	closed  chan struct{}
}

// refusedHead is what the server is handed in place of a head the gate refused.
const refusedHead = "GET / HTTP/1.1\r\nHost: refused.invalid\r\nConnection: close\r\n\r\n"

// next returns the gate's word on the request the handler is serving: synthetic, with the
// reason, for a head the gate refused.
func (g *headGate) next() (why string, synthetic bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) == 0 {
		return "", false
	}
	why = g.queue[0]
	g.queue = g.queue[1:]
	return why, why != ""
}

func (g *headGate) push(why string) {
	g.mu.Lock()
	g.queue = append(g.queue, why)
	g.mu.Unlock()
}

func (g *headGate) Read(p []byte) (int, error) {
	for {
		if len(g.pending) > 0 {
			n := copy(p, g.pending)
			g.pending = g.pending[n:]
			return n, nil
		}
		if g.done {
			return 0, io.EOF
		}
		if g.body != nil {
			if !g.chunked {
				n, err := g.body.Read(p)
				if err == io.EOF {
					g.body, err = nil, nil
					if n == 0 {
						continue
					}
				}
				return n, err
			}
			if g.buf == nil {
				g.buf = make([]byte, 16<<10)
			}
			n, err := g.body.Read(g.buf)
			if n > 0 {
				g.pending = strconv.AppendInt(g.pending[:0], int64(n), 16)
				g.pending = append(g.pending, "\r\n"...)
				g.pending = append(g.pending, g.buf[:n]...)
				g.pending = append(g.pending, "\r\n"...)
			}
			switch {
			case err == io.EOF:
				g.pending = append(g.pending, "0\r\n\r\n"...)
				g.body = nil
			case err != nil:
				return 0, err
			}
			continue
		}
		head, err := g.peekHead()
		if err != nil {
			return 0, err
		}
		if head == nil {
			g.refuseHead("the request head is larger than " + strconv.Itoa(maxModelHead) + " bytes")
			continue
		}
		if why := modelapi.Framing(head); why != "" {
			g.refuseHead(why)
			continue
		}
		raw := append([]byte(nil), head...) // ReadRequest consumes the buffer it is in
		req, err := http.ReadRequest(g.br)
		if err != nil {
			g.refuseHead("a malformed request")
			continue
		}
		g.push("")
		g.pending = raw
		if req.Body != nil && req.Body != http.NoBody {
			g.body, g.chunked = req.Body, len(req.TransferEncoding) > 0
		}
	}
}

// peekHead returns the next request head, unread, from the socket; nil (and no error)
// when maxModelHead bytes hold no complete head.
func (g *headGate) peekHead() ([]byte, error) {
	for {
		n := g.br.Buffered()
		if n > 0 {
			b, _ := g.br.Peek(n)
			if end := modelapi.HeadEnd(b); end >= 0 {
				return b[:end], nil
			}
			if n >= maxModelHead {
				return nil, nil
			}
		}
		if _, err := g.br.Peek(n + 1); err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, nil
			}
			return nil, err
		}
	}
}

// refuseHead hands the server the synthetic head in place of a refused one and nothing
// after it.
func (g *headGate) refuseHead(why string) {
	g.push(why)
	g.pending = []byte(refusedHead)
	g.done = true
}

func (g *headGate) Write(p []byte) (int, error) {
	n, err := g.TCPConn.Write(p)
	g.m.down.Add(int64(n))
	return n, err
}

func (g *headGate) Close() error {
	var err error
	g.closing.Do(func() {
		err = g.TCPConn.Close()
		close(g.closed)
	})
	return err
}

// countingReader counts what the guest sent.
type countingReader struct {
	c *net.TCPConn
	m *meter
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.c.Read(p)
	c.m.up.Add(int64(n))
	return n, err
}

// oneConn is a listener that accepts c once, then blocks until c or the listener is
// closed (http.Server.Close waits for Serve to return before it closes the connections).
type oneConn struct {
	c       *headGate
	once    sync.Once
	closing sync.Once
	done    chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = l.c })
	if c != nil {
		return c, nil
	}
	select {
	case <-l.c.closed:
	case <-l.done:
	}
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.closing.Do(func() { close(l.done) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }
