package modelfwd

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// maxDiscard bounds what the forward reads and drops of a body nobody read (a refused
// request's) to keep the connection for the next request; past it the connection ends. The
// figure is http.Server's.
const maxDiscard = 256 << 10

// watchAfter is how long a request may wait on the server before the forward starts
// watching whether its guest went away (watchGone): long enough that a quick answer never
// pays for the watch, short enough that a model thinking for a gone guest is stopped soon.
const watchAfter = 250 * time.Millisecond

// modelResponse is the http.ResponseWriter of one response of the HTTP forward, written to
// the guest's connection through bw. It frames what the handler writes as http.Server
// would: a Content-Length the handler set is kept (and held to), a body of unknown length
// is chunked for HTTP/1.1 guests and ends the connection for HTTP/1.0 ones, HEAD, 204 and
// 304 answers carry no body, announced trailers follow the last chunk. Flush sends what is
// buffered at once (the proxy flushes after every read from the server). It is used from
// the handler's goroutine only.
type modelResponse struct {
	bw  *bufio.Writer
	req *http.Request
	h   http.Header

	wrote     bool           // the head is out
	continued bool           // a 100 Continue went out, or may no longer go
	noBody    bool           // the answer carries no body
	chunked   io.WriteCloser // the chunked body; nil otherwise
	left      int64          // bytes a Content-Length still promises; -1 without one
	close     bool           // the connection ends after this response
	err       error          // the first write error
}

func (w *modelResponse) Header() http.Header { return w.h }

func (w *modelResponse) WriteHeader(code int) {
	if w.wrote || w.err != nil {
		return
	}
	if code >= 100 && code < 200 {
		// An interim answer, passed on as it is (101 never comes: an Upgrade is refused).
		w.writeHead(code, w.h.Clone())
		if code == http.StatusContinue {
			w.continued = true
		}
		return
	}
	w.wrote, w.continued = true, true
	h := w.h
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	w.left = -1
	h.Del("Transfer-Encoding")
	if cl := h.Get("Content-Length"); cl != "" {
		n, err := strconv.ParseInt(cl, 10, 64)
		switch {
		case err != nil || n < 0:
			h.Del("Content-Length")
		case !w.noBody:
			w.left = n
		}
	}
	if w.req.Close || !w.req.ProtoAtLeast(1, 1) || httpguts.HeaderValuesContainsToken(h["Connection"], "close") {
		w.close = true
	}
	if !w.noBody && w.left < 0 {
		if w.req.ProtoAtLeast(1, 1) {
			h.Set("Transfer-Encoding", "chunked")
		} else {
			w.close = true // the end of the body is the end of the connection
		}
	}
	if w.close {
		h.Set("Connection", "close")
	} else {
		h.Del("Connection")
	}
	w.writeHead(code, h)
	if h.Get("Transfer-Encoding") == "chunked" {
		w.chunked = httputil.NewChunkedWriter(w.bw)
	}
}

// writeHead writes the status line and h, leaving out the trailers a handler names with
// http.TrailerPrefix.
func (w *modelResponse) writeHead(code int, h http.Header) {
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	fmt.Fprintf(w.bw, "HTTP/1.1 %03d %s\r\n", code, text)
	var skip map[string]bool
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if skip == nil {
				skip = map[string]bool{}
			}
			skip[k] = true
		}
	}
	if err := h.WriteSubset(w.bw, skip); err != nil {
		w.err = err
		return
	}
	if _, err := w.bw.WriteString("\r\n"); err != nil {
		w.err = err
	}
}

func (w *modelResponse) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	var over error
	if w.left >= 0 {
		if int64(len(p)) > w.left {
			p, over = p[:w.left], http.ErrContentLength
		}
		w.left -= int64(len(p))
	}
	var n int
	var err error
	if w.chunked != nil {
		n, err = w.chunked.Write(p)
	} else {
		n, err = w.bw.Write(p)
	}
	if err != nil {
		w.err = err
		return n, err
	}
	return n, over
}

// FlushError sends what is buffered to the guest now.
func (w *modelResponse) FlushError() error {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	return w.err
}

func (w *modelResponse) Flush() { w.FlushError() }

// finish ends the response: the head if nothing was written, the last chunk and the
// trailers, everything flushed. It reports whether the connection may carry the next
// request: not after a write error, a body short of its Content-Length, an answer that
// closes, or a request body left unread beyond maxDiscard (or never asked for with Expect:
// 100-continue).
func (w *modelResponse) finish() bool {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked != nil && w.err == nil {
		w.chunked.Close() // the last chunk: "0\r\n"
		trailers := http.Header{}
		for _, v := range w.h.Values("Trailer") {
			for name := range strings.SplitSeq(v, ",") {
				name = http.CanonicalHeaderKey(strings.TrimSpace(name))
				if vs := w.h.Values(name); name != "" && len(vs) > 0 {
					trailers[name] = vs
				}
			}
		}
		for k, vs := range w.h {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				trailers[http.CanonicalHeaderKey(name)] = vs
			}
		}
		if err := trailers.Write(w.bw); err != nil {
			w.err = err
		} else if _, err := w.bw.WriteString("\r\n"); err != nil {
			w.err = err
		}
	}
	if w.left > 0 {
		w.close = true // the guest could not find where the next answer begins
	}
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	if b, ok := w.req.Body.(*guestBody); ok && !w.close && !b.eof {
		if b.expect != nil && !w.continued {
			return false // the guest waits to be asked for the body: it may or may not send it
		}
		n, err := io.CopyN(io.Discard, b.rc, maxDiscard+1)
		if err != io.EOF || n > maxDiscard {
			return false
		}
	}
	return w.err == nil && !w.close
}

// guestBody is a request's body as the proxy reads it: Close does not read the rest (net/http
// would, to the end, for a body from http.ReadRequest; finish decides), and with expect set,
// the first read sends the guest its 100 Continue.
type guestBody struct {
	rc     io.ReadCloser
	expect *modelResponse // non-nil while a 100 Continue is owed
	eof    bool
}

func (b *guestBody) Read(p []byte) (int, error) {
	if w := b.expect; w != nil {
		b.expect = nil
		if !w.continued {
			w.continued = true
			w.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if err := w.bw.Flush(); err != nil {
				w.err = err
				return 0, err
			}
		}
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *guestBody) Close() error { return nil }
