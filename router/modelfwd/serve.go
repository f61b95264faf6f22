package modelfwd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/internal/httphead"
	"github.com/agentcage/router/internal/tally"
	"github.com/agentcage/router/rules/modelapi"
	"github.com/agentcage/router/rules/refusal"
	"golang.org/x/net/http/httpguts"
)

// The HTTP forward: a model forward whose API is not "tcp" reads each request on an
// accepted connection with net/http's own parser (http.ReadRequest), judges it with
// modelapi before anything of it reaches the server, and hands it to a reverse proxy
// (httputil.ReverseProxy) to the model server. Keep-alive and pipelined requests are read
// one after another, each answered before the next is read:
//
//	guest ─► readModelRequest ─► modelHandler ─► ReverseProxy ─► modelClient ─► model server
//	          │ framing, head size   │ method, path (modelapi.Check), Upgrade, max_body,
//	          │                      │ Content-Encoding; the body checked as it streams
//	          │                      │ (checkedBody: what the server would fetch)
//	          └ refused: 403, closed └ refused: 403 JSON, counted as model-api
//
// readModelRequest checks the head's raw bytes for ambiguous framing (modelapi.Framing:
// Content-Length with Transfer-Encoding, two lengths, obsolete folding) before net/http
// parses it, since net/http would resolve those silently. The body the proxy sends on is
// the one net/http framed, so the check and the server can never disagree on where one
// request ends and the next begins.
//
// The answer goes back through modelResponse, a small http.ResponseWriter over the
// connection, not through an http.Server: the server's per-request background reader
// (started when a body is read whole, stopped by a deadline and a wake-up after the
// response) cost about 30-50 µs of each response's first byte on a 2-core host
// (BenchmarkModelForward). The framing it writes is net/http's: the header with
// http.Header.Write, a body of unknown length with httputil's chunked writer. A guest that
// goes away while the server thinks is still noticed (watchGone), after watchAfter.
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

// Server serves the HTTP forwards' connections (Serve). Safe for concurrent use.
type Server struct {
	book      *refusal.Book
	note      func(reason, who string) bool
	canaries  *tally.Once
	transport modelRoundTripper
	bufs      copyBufs
}

// Config is what a Server needs of the process around it.
type Config struct {
	// Dial connects to a model server (the router's own dialer: never captured), bounding
	// its own wait. Required.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Refusals counts the refused requests (model-api, canary). Required.
	Refusals *refusal.Book
	// Note counts a refused or failed request of reason from source who and reports
	// whether to log it one by one (the router's refusal summary). Required.
	Note func(reason, who string) bool
	// Canaries says whether a canary is logged: the first time its key is seen. Required.
	Canaries *tally.Once
}

// New returns a Server. Its client to the model servers: connections dialled with
// cfg.Dial, kept alive and reused, no compression asked for (the guest's own
// Accept-Encoding goes through untouched), no proxy, HTTP/1.1. On Linux it is modelClient
// (client_linux.go), elsewhere net/http's Transport. Close releases its idle connections.
func New(cfg Config) *Server {
	return &Server{book: cfg.Refusals, note: cfg.Note, canaries: cfg.Canaries, transport: newModelRoundTripper(cfg.Dial)}
}

// Close closes the idle connections to the model servers; the connections being served
// keep theirs.
func (s *Server) Close() { s.transport.CloseIdleConnections() }

// Conn is one guest connection for Serve.
type Conn struct {
	C *net.TCPConn
	// First are bytes of the guest's already read (a gated flow's), read before C's.
	First []byte
	// Self is the address the guest connected to ("": C's own): an absolute-form target
	// must name it.
	Self string
	// Src is the guest: the refusals, the canaries and the credentials' holder name it.
	Src netip.AddrPort
	// Up and Down count the bytes from and to the guest, First's included.
	Up, Down *atomic.Int64
	// Idle is the idle timeout between two requests (0: none).
	Idle time.Duration
	Log  *slog.Logger
}

// Serve serves one connection of the HTTP forward fw until the guest or the server closes
// it, the idle timeout passes between requests, or ctx is done; it closes c.C and returns
// the requests read and those refused.
func (s *Server) Serve(ctx context.Context, fw *Forward, c Conn) (requests, refused int64) {
	conn, self := c.C, c.Self
	counted := countedConn{conn, c.Up, c.Down}
	var in io.Reader = counted
	if len(c.First) > 0 {
		c.Up.Add(int64(len(c.First)))
		in = io.MultiReader(bytes.NewReader(c.First), in)
	}
	if self == "" {
		self = conn.LocalAddr().String()
	}
	br := bufio.NewReaderSize(in, maxModelHead)
	bw := bufio.NewWriterSize(counted, 4<<10)
	target := &url.URL{Scheme: "http", Host: fw.Connect.String()}
	h := &modelHandler{s: s, fw: fw, src: c.Src, log: c.Log, self: self}
	h.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // the guest's Host, as a raw pipe passed it
		},
		Transport:     s.transport,
		FlushInterval: -1,
		BufferPool:    &s.bufs,
		ErrorHandler:  h.proxyError,
		ErrorLog:      slog.NewLogLogger(c.Log.Handler(), slog.LevelDebug),
	}
	connCtx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) }) // a stopping router ends any wait
	// answered: the loop ended after an answer, and the guest may still be sending (lingerClose).
	answered := false
	for connCtx.Err() == nil {
		req, why, err := readModelRequest(conn, br, c.Idle)
		if err != nil {
			break // the guest closed, the idle timeout passed, or the router stops
		}
		h.requests.Add(1)
		if why != "" {
			// The head was never parsed: the answer is framed for an HTTP/1.1 GET, and closes.
			req = &http.Request{Method: http.MethodGet, ProtoMajor: 1, ProtoMinor: 1, Close: true, Body: http.NoBody}
			w := &modelResponse{bw: bw, req: req, h: http.Header{}}
			h.refuse(w, "", "", why, true) // no method, no path
			w.finish()
			answered = true
			break
		}
		req.RemoteAddr = c.Src.String()
		reqCtx, done := context.WithCancel(connCtx)
		req = req.WithContext(reqCtx)
		w := &modelResponse{bw: bw, req: req, h: http.Header{}}
		expect := req.Header.Get("Expect")
		if req.Body != nil && req.Body != http.NoBody {
			b := &guestBody{rc: req.Body}
			if strings.EqualFold(expect, "100-continue") && req.ProtoAtLeast(1, 1) {
				b.expect = w
			}
			req.Body = b
		}
		if expect != "" && !strings.EqualFold(expect, "100-continue") {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusExpectationFailed)
			w.finish()
			done()
			answered = true
			break
		}
		unwatch := watchGone(conn, done)
		h.ServeHTTP(w, req)
		unwatch()
		done()
		if !w.finish() {
			answered = true
			break
		}
	}
	if answered {
		lingerClose(connCtx, conn, br)
	}
	stop()
	cancel()
	conn.Close()
	return h.requests.Load(), h.refusedN.Load()
}

// readModelRequest reads the next request head from br: it waits up to idle for its first
// byte, then up to modelHeadTimeout for the rest. A head the forward refuses unparsed
// (too large, ambiguous framing, malformed) returns why; the connection then ends after the
// refusal. err is the connection's end.
func readModelRequest(c interface{ SetReadDeadline(time.Time) error }, br *bufio.Reader, idle time.Duration) (req *http.Request, why string, err error) {
	if idle > 0 {
		c.SetReadDeadline(time.Now().Add(idle))
	}
	if _, err := br.Peek(1); err != nil {
		return nil, "", err
	}
	c.SetReadDeadline(time.Now().Add(modelHeadTimeout))
	defer c.SetReadDeadline(time.Time{}) // no timeout on a body
	req, why, err = httphead.Read(br)
	if req == nil {
		return nil, why, err
	}
	// What http.Server would refuse before its handler, besides (RFC 9112 sections 3.2, 5).
	if req.Host == "" && req.ProtoAtLeast(1, 1) && req.Method != http.MethodConnect {
		return nil, "no Host header", nil
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, "an invalid header name", nil
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, "an invalid header value", nil
			}
		}
	}
	return req, "", nil
}

// modelHandler judges and proxies the requests of one connection, one at a time, in
// order.
type modelHandler struct {
	s     *Server
	fw    *Forward
	src   netip.AddrPort // the guest
	log   *slog.Logger
	proxy *httputil.ReverseProxy
	self  string // the address the guest connected to: an absolute-form target must name it

	requests, refusedN atomic.Int64
}

func (h *modelHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	v := h.fw.API.Check(req.Method, req.RequestURI, h.self)
	path := v.Path
	if !v.OK() {
		h.refuse(w, req.Method, req.URL.EscapedPath(), v.Reason, false)
		return
	}
	if !h.credentials(w, req, path) {
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
	if req.Body != nil && req.Body != http.NoBody {
		if why := modelapi.ContentEncoding(req.Header.Values("Content-Encoding")); why != "" {
			h.refuse(w, req.Method, path, why, true)
			return
		}
		req.Body = &checkedBody{rc: req.Body, check: h.fw.API.Body()} // body.go
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
	h.s.book.Add(refusal.ModelAPI, refusal.Event{Src: h.src, Dst: h.fw.Connect, Rule: "forward " + h.fw.Name, Request: request})
	if h.s.note("forward "+h.fw.Name+": model api", h.src.Addr().String()) {
		h.log.Warn("forward refused a request", "method", clip(method, 32), "path", clip(path, 200), "reason", why)
	}
	if end {
		w.Header().Set("Connection", "close")
	}
	writeJSONError(w, http.StatusForbidden, h.fw.Name, why)
}

// proxyError answers what the proxy could not carry: a body over max_body or one the body
// check refuses (403), the model server unreachable or failing mid-request (502).
func (h *modelHandler) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		h.refuse(w, req.Method, req.URL.Path, fmt.Sprintf("the body is larger than the forward's max_body (%d bytes)", tooBig.Limit), true)
		return
	}
	var bad *modelapi.BodyError
	if errors.As(err, &bad) {
		h.refuse(w, req.Method, req.URL.Path, bad.Error(), true)
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the guest went away
	}
	if h.s.note("forward "+h.fw.Name+": connect failed", h.src.Addr().String()) {
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

// countedConn is the guest's connection, counting what the guest sent in up and what it
// was sent in down.
type countedConn struct {
	c        *net.TCPConn
	up, down *atomic.Int64
}

func (c countedConn) Read(p []byte) (int, error) {
	n, err := c.c.Read(p)
	c.up.Add(int64(n))
	return n, err
}

func (c countedConn) Write(p []byte) (int, error) {
	n, err := c.c.Write(p)
	c.down.Add(int64(n))
	return n, err
}
