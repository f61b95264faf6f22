// Package modeltest is a fake model server for tests and benchmarks: a small
// OpenAI-compatible and Ollama-like HTTP server on loopback that logs every request it
// receives (method and path, as it saw them), so a test can say what reached the server
// and what never did.
//
// Routes: GET /v1/models lists ModelID; POST /v1/chat/completions answers a completion, or
// with "stream": true server-sent events; POST /api/chat answers NDJSON lines, streamed;
// POST /api/embed answers the size of the body it read. Every other request (the
// management calls included) answers 200 {"status":"success"}: a server that did what it
// was asked, so that only the log tells a refused call from a passed one.
package modeltest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// ModelID is the one model the server lists.
const ModelID = "fake-model"

// Request is one request the server received.
type Request struct {
	Method, Path string // the path as the server routed it (decoded)
	RawURI       string // the request target as sent
	Body         int64  // bytes of body read
	Whole        bool   // the body was read to its end (not cut off by the client)
	Auth         string // the Authorization header as it arrived
}

// Server is a running fake model server. Its methods are safe for concurrent use.
type Server struct {
	events int           // streamed events (then the last, which ends the stream)
	gap    time.Duration // the pause after each

	ln  net.Listener
	srv *http.Server
	mu  sync.Mutex
	log []Request
}

// Start starts a server on 127.0.0.1 with events streamed events gap apart; Close stops it.
func Start(events int, gap time.Duration) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("modeltest: listen: %w", err)
	}
	s := &Server{events: events, gap: gap, ln: ln}
	s.srv = &http.Server{Handler: s}
	go s.srv.Serve(ln)
	return s, nil
}

// Addr is the server's address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Log returns a copy of the requests received so far, in order.
func (s *Server) Log() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<30))
	s.mu.Lock()
	s.log = append(s.log, Request{Method: r.Method, Path: r.URL.Path, RawURI: r.RequestURI, Body: n, Whole: err == nil, Auth: r.Header.Get("Authorization")})
	s.mu.Unlock()
	switch r.Method + " " + r.URL.Path {
	case "GET /v1/models":
		writeJSON(w, map[string]any{"object": "list", "data": []any{map[string]any{"id": ModelID, "object": "model", "owned_by": "modeltest"}}})
	case "POST /v1/chat/completions":
		s.stream(w, "text/event-stream", func(i int) string {
			if i == s.events {
				return "data: [DONE]\n\n"
			}
			return fmt.Sprintf(`data: {"object":"chat.completion.chunk","model":%q,"choices":[{"index":0,"delta":{"content":"event-%d"}}]}`+"\n\n", ModelID, i)
		})
	case "POST /api/chat":
		s.stream(w, "application/x-ndjson", func(i int) string {
			return fmt.Sprintf(`{"model":%q,"message":{"role":"assistant","content":"event-%d"},"done":%v}`+"\n", ModelID, i, i == s.events)
		})
	case "POST /api/embed":
		writeJSON(w, map[string]any{"model": ModelID, "bytes": n})
	default:
		writeJSON(w, map[string]any{"status": "success"})
	}
}

// stream writes events 0..Events (the last one ends the stream), each flushed, Gap apart.
func (s *Server) stream(w http.ResponseWriter, contentType string, event func(int) string) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for i := 0; i <= s.events; i++ {
		if _, err := io.WriteString(w, event(i)); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if i < s.events && s.gap > 0 {
			time.Sleep(s.gap)
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
