package modelfwd

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentcage/router/internal/wait"
)

// testModelServer is what modelServer started: its address, the connections it accepted
// and closed (when idle), and a signal for each GET /slow that reached it.
type testModelServer struct {
	addr          string
	conns, closed atomic.Int64
	slow          chan struct{}
}

// modelServer serves POST /echo (the body back) and GET /slow (waits for its context) on
// loopback; closeIdle closes every connection after its response, as a server whose
// keep-alive timeout has passed would, so the client's next request meets a closed one.
func modelServer(t *testing.T, closeIdle bool) *testModelServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ms := &testModelServer{addr: ln.Addr().String(), slow: make(chan struct{}, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		ms.slow <- struct{}{}
		<-r.Context().Done()
	})
	s := &http.Server{Handler: mux, ConnState: func(c net.Conn, st http.ConnState) {
		switch {
		case st == http.StateNew:
			ms.conns.Add(1)
		case st == http.StateIdle && closeIdle:
			c.Close()
			ms.closed.Add(1)
		}
	}}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ms
}

func newTestModelClient() *modelClient {
	var d net.Dialer
	return &modelClient{dial: d.DialContext, maxIdle: 4, idleTimeout: time.Minute}
}

func post(t *testing.T, c http.RoundTripper, addr, body string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/echo", strings.NewReader(body))
	resp, err := c.RoundTrip(req)
	if err != nil {
		t.Fatalf("POST %q: %v", body, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestModelClientReusesConnections(t *testing.T) {
	ms := modelServer(t, false)
	c := newTestModelClient()
	defer c.CloseIdleConnections()
	for i := range 5 {
		if got, want := post(t, c, ms.addr, strings.Repeat("x", i+1)), strings.Repeat("x", i+1); got != want {
			t.Fatalf("echo %d: %q, want %q", i, got, want)
		}
	}
	if n := ms.conns.Load(); n != 1 {
		t.Errorf("5 requests took %d connections, want 1 kept alive", n)
	}
}

// A server that closed its side of an idle connection: the client sees it before reuse (or
// retries once on a fresh connection) and the guest never gets a 502 for it.
func TestModelClientServerClosedIdle(t *testing.T) {
	ms := modelServer(t, true)
	c := newTestModelClient()
	defer c.CloseIdleConnections()
	for i := range 5 {
		// The server closed the connection of the last response (its FIN on its way: on
		// loopback it is there by the peek, else the retry covers it).
		wait.For(t, "the server's close", waitFor, func() bool { return ms.closed.Load() >= int64(i) })
		if got := post(t, c, ms.addr, "hello"); got != "hello" {
			t.Fatalf("request %d: %q", i, got)
		}
	}
	if n := ms.conns.Load(); n != 5 {
		t.Errorf("%d connections, want 5 (each closed by the server)", n)
	}
}

// The retry: a kept connection the server closed after the peek. Its body is sent again,
// whole.
func TestModelClientRetriesOnce(t *testing.T) {
	ms := modelServer(t, false)
	addr := ms.addr
	c := newTestModelClient()
	defer c.CloseIdleConnections()
	post(t, c, addr, "warm")
	// A kept connection that is dead although the peek cannot tell: its server reads the
	// request, then closes without a word.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		s.Read(make([]byte, 4096))
		s.Close()
	}()
	dead, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.put(addr, &modelConn{c: dead, br: bufio.NewReader(dead), bw: bufio.NewWriter(dead)})
	if got := post(t, c, addr, "again"); got != "again" {
		t.Fatalf("retried request: %q", got)
	}
}

// A request whose guest went away ends, although the server never answers.
func TestModelClientCancelEndsWait(t *testing.T) {
	ms := modelServer(t, false)
	c := newTestModelClient()
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ms.addr+"/slow", nil)
	done := make(chan error, 1)
	go func() {
		_, err := c.RoundTrip(req)
		done <- err
	}()
	within(t, ms.slow, waitFor, "the request to reach the server") // it waits on the server
	cancel()
	if err := within(t, done, waitFor, "the cancelled request's end"); err == nil {
		t.Fatal("a cancelled request succeeded")
	}
}
