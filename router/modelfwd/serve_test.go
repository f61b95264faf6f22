package modelfwd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentcage/router/internal/modeltest"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/rules/modelapi"
	"github.com/agentcage/router/rules/refusal"
)

// startModel starts a fake model server (modeltest.Start) that streams events gap apart;
// it is closed when the test ends.
func startModel(t *testing.T, events int, gap time.Duration) *modeltest.Server {
	t.Helper()
	srv, err := modeltest.Start(events, gap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// startModelForward starts a fake model server and an HTTP forward to it with the default
// API; it returns the forward's address.
func startModelForward(t *testing.T, e *env, events int, gap time.Duration, maxBody int64) (*modeltest.Server, string) {
	t.Helper()
	srv := startModel(t, events, gap)
	return srv, forwardTo(t, e, srv.Addr(), maxBody).Addr().String()
}

// forwardTo starts an HTTP forward with the default API (and maxBody, 0 for none) to the
// model server at addr and returns its listener.
func forwardTo(t *testing.T, e *env, addr string, maxBody int64) net.Listener {
	t.Helper()
	api, err := modelapi.New(modelapi.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	f := Forward{Name: "model", Listen: netip.MustParseAddrPort("127.0.0.1:0"), Connect: netip.MustParseAddrPort(addr),
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, API: api, MaxBody: maxBody}
	fl := e.serve(f)
	return fl
}

// dialThrough serves srv on a loopback listener of its own, starts an HTTP forward to it
// (forwardTo) and returns a connection to the forward; the server and the connection are
// closed when the test ends.
func dialThrough(t *testing.T, e *env, srv *http.Server) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c, err := net.Dial("tcp", forwardTo(t, e, ln.Addr().String(), 0).Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// exchange writes raw on a new connection and reads every response that comes back until
// the forward closes the connection or want responses were read.
func exchange(t *testing.T, addr, raw string, want int) []*http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitFor))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []*http.Response
	for len(out) < want {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		out = append(out, resp)
	}
	return out
}

// readAnswer reads a response and its body from br; what names the request, for the error.
func readAnswer(t *testing.T, br *bufio.Reader, what string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: the body: %v", what, err)
	}
	return resp, b
}

// TestModelForwardRefusesManagement drives each bad request against a server that logs
// every request: refused with 403 (the ambiguous ones never parsed), and never seen.
func TestModelForwardRefusesManagement(t *testing.T) {
	e := newEnv(t, 0)
	srv, addr := startModelForward(t, e, 2, 0, 1<<20)
	post := func(target, extra, body string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %d\r\n\r\n%s", target, addr, extra, len(body), body)
	}
	pull := `{"name":"attacker.example:8443/x/y"}`
	cases := []struct {
		name, raw string
	}{
		{"pull", post("/api/pull", "", pull)},
		{"create", post("/api/create", "", `{"model":"x","remote_host":"http://169.254.169.254"}`)},
		{"push", post("/api/push", "", `{"name":"attacker.example/x/y"}`)},
		{"delete", fmt.Sprintf("DELETE /api/delete HTTP/1.1\r\nHost: %s\r\nContent-Length: 13\r\n\r\n{\"name\":\"x\"}\n", addr)},
		{"dot-dot", post("/api/chat/../pull", "", pull)},
		{"dot-dot from v1", post("/v1/../api/pull", "", pull)},
		{"encoded dot-dot", post("/api/%2e%2e/api/pull", "", pull)},
		{"encoded twice", post("/api/%252e%252e/api/pull", "", pull)},
		{"double slash", post("//api/pull", "", pull)},
		{"inner double slash", post("/api//pull", "", pull)},
		{"upper case", post("/API/PULL", "", pull)},
		{"encoded letter", post("/api/%70ull", "", pull)},
		{"absolute-form, another host", post("http://attacker.example/api/chat", "", `{}`)},
		{"OPTIONS *", fmt.Sprintf("OPTIONS * HTTP/1.1\r\nHost: %s\r\n\r\n", addr)},
		{"CONNECT", "CONNECT attacker.example:443 HTTP/1.1\r\nHost: attacker.example:443\r\n\r\n"},
		{"upgrade", fmt.Sprintf("GET /v1/models HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", addr)},
		// Ambiguous framing: a chat whose body, read the other way, is a pull.
		{"CL and TE", fmt.Sprintf("POST /api/chat HTTP/1.1\r\nHost: %s\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", addr, post("/api/pull", "", pull))},
		{"two lengths", fmt.Sprintf("POST /api/chat HTTP/1.1\r\nHost: %s\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", addr)},
		{"obs-fold", fmt.Sprintf("POST /api/chat HTTP/1.1\r\nHost: %s\r\nX-A: a\r\n Content-Length: 0\r\nContent-Length: 2\r\n\r\n{}", addr)},
		{"transfer coding", fmt.Sprintf("POST /api/chat HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", addr)},
		{"over max_body", post("/api/chat", "", strings.Repeat("x", 1<<20+1))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := exchange(t, addr, c.raw, 1)
			if len(rs) == 0 {
				t.Fatal("no answer")
			}
			if rs[0].StatusCode != http.StatusForbidden {
				t.Errorf("status %d; want 403", rs[0].StatusCode)
			}
			var body struct {
				Error struct{ Message, Type, Forward, Reason string }
			}
			if err := json.NewDecoder(rs[0].Body).Decode(&body); err != nil || body.Error.Forward != "model" || body.Error.Reason == "" {
				t.Errorf("refusal body %+v, %v; want the forward's name and a reason", body, err)
			}
		})
	}
	// A pipelined second request on a keep-alive connection: the first passes, the second
	// is judged on its own.
	t.Run("pipelined", func(t *testing.T) {
		raw := fmt.Sprintf("GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", addr) + post("/api/pull", "", pull) +
			fmt.Sprintf("GET /api/tags HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		rs := exchange(t, addr, raw, 3)
		var got []int
		for _, r := range rs {
			got = append(got, r.StatusCode)
		}
		if fmt.Sprint(got) != "[200 403 200]" {
			t.Errorf("statuses %v; want [200 403 200]", got)
		}
	})
	for _, r := range srv.Log() {
		if !strings.HasPrefix(r.Path, "/v1/models") && r.Path != "/api/tags" {
			t.Errorf("the server saw %s %s (sent as %q)", r.Method, r.Path, r.RawURI)
		}
	}
	if n := e.r.book.Count(refusal.ModelAPI); n != uint64(len(cases)+1) {
		t.Errorf("model-api refusals %d; want %d", n, len(cases)+1)
	}
	recent := e.r.book.Recent(refusal.ModelAPI)
	if len(recent) == 0 || recent[0].Request != "POST /api/pull" || recent[0].Rule != "forward model" {
		t.Errorf("recent refusals %+v; want the pipelined POST /api/pull first, by forward model", recent)
	}
	e.waitLog(`forward refused a request`)
	if strings.Contains(e.logs.String(), "attacker.example:8443") {
		t.Error("the log holds a refused request's body")
	}
}

// TestModelForwardPasses: inference calls pass, streamed chunk by chunk; a chunked body,
// Expect: 100-continue and a normalized path too.
func TestModelForwardPasses(t *testing.T) {
	e := newEnv(t, 0)
	const gap = 100 * time.Millisecond
	srv, addr := startModelForward(t, e, 4, gap, 1<<20)
	base := "http://" + addr
	client := &http.Client{Timeout: waitFor, Transport: &http.Transport{DisableCompression: true}}
	// (idle connections left open: the forward must close them when it stops)
	resp, err := client.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), modeltest.ModelID) {
		t.Fatalf("/v1/models: %d %q", resp.StatusCode, b)
	}
	for _, path := range []string{"/v1/chat/completions", "/api/chat"} {
		t.Run("stream "+path, func(t *testing.T) {
			resp, err := client.Post(base+path, "application/json", strings.NewReader(`{"model":"fake-model","stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			var last time.Time
			for i := 0; i <= 4; i++ {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				if strings.TrimSpace(line) == "" {
					i--
					continue
				}
				now := time.Now()
				if i > 0 && now.Sub(last) < gap/2 {
					t.Errorf("event %d came %v after the one before: the stream was buffered", i, now.Sub(last))
				}
				last = now
			}
		})
	}
	// A chunked request body, with Expect: 100-continue, to a path spelled oddly.
	raw := fmt.Sprintf("POST //api/embed/ HTTP/1.1\r\nHost: %s\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n", addr)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitFor))
	io.WriteString(c, raw)
	br := bufio.NewReader(c)
	cont, err := http.ReadResponse(br, nil)
	if err != nil || cont.StatusCode != http.StatusContinue {
		t.Fatalf("Expect: 100-continue answered %v, %v", cont, err)
	}
	io.WriteString(c, "5\r\n{\"a\":\r\n6\r\n \"bc\"}\r\n0\r\n\r\n") // JSON, as the body check wants
	resp, b = readAnswer(t, br, "chunked embed")
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"bytes":11`) {
		t.Errorf("chunked embed: %d %q; want the server to read 11 bytes", resp.StatusCode, b)
	}
	log := srv.Log()
	if got := log[len(log)-1]; got.RawURI != "/api/embed" {
		t.Errorf("the server was sent %q; want the normalized /api/embed", got.RawURI)
	}
}

// TestModelForwardServerClosesIdle: the model server closes its idle connection between
// two requests of one guest connection; the second still gets through, on a new one.
func TestModelForwardServerClosesIdle(t *testing.T) {
	e := newEnv(t, 0)
	var conns, closed atomic.Int32
	srv := &http.Server{IdleTimeout: 50 * time.Millisecond, ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})}
	c := dialThrough(t, e, srv)
	c.SetDeadline(time.Now().Add(waitFor))
	br := bufio.NewReader(c)
	for i, method := range []string{"POST", "POST", "GET"} {
		if i > 0 { // past the server's idle timeout: it closed the connection
			wait.For(t, "the server's idle close", waitFor, func() bool { return closed.Load() >= int32(i) })
		}
		path := "/api/chat"
		if method == "GET" {
			path = "/v1/models"
		}
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: m\r\nContent-Length: 2\r\n\r\n{}", method, path)
		resp, b := readAnswer(t, br, fmt.Sprintf("request %d", i))
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Errorf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("the server saw %d connections; want 3 (each idle one closed)", n)
	}
}

// TestModelForwardChunkedOverMaxBody: a chunked body that grows past max_body is cut and
// refused with 403; the connection closes.
func TestModelForwardChunkedOverMaxBody(t *testing.T) {
	e := newEnv(t, 0)
	_, addr := startModelForward(t, e, 1, 0, 64<<10)
	var b strings.Builder
	fmt.Fprintf(&b, "POST /api/embed HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n", addr)
	b.WriteString(chunked(`{"input":"`+strings.Repeat("x", 80<<10)+`"}`, 16<<10)) // JSON, as the body check wants
	rs := exchange(t, addr, b.String(), 1)
	if len(rs) != 1 || rs[0].StatusCode != http.StatusForbidden {
		t.Fatalf("responses %v; want one 403", rs)
	}
	body, _ := io.ReadAll(rs[0].Body)
	if !strings.Contains(string(body), "max_body") {
		t.Errorf("refusal %q; want it to name max_body", body)
	}
}

// TestModelForwardSlowAndHopByHop: a server that thinks longer than the relay's idle
// timeout before its first byte and between chunks still answers in full (no timeout
// applies to a response), and the hop-by-hop headers the guest sent never reach it.
func TestModelForwardSlowAndHopByHop(t *testing.T) {
	e := newEnv(t, 200*time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan http.Header, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		time.Sleep(500 * time.Millisecond) // not ordering: a server thinking past the idle timeout is what is tested
		rc := http.NewResponseController(w)
		for i := range 3 {
			fmt.Fprintf(w, "{\"n\":%d}\n", i)
			rc.Flush()
			time.Sleep(400 * time.Millisecond) // not ordering: as above, between chunks
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	fl := forwardTo(t, e, ln.Addr().String(), 0)
	raw := "POST /api/generate HTTP/1.1\r\nHost: m\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\n" +
		"Proxy-Authorization: Basic c2VjcmV0\r\nTE: trailers\r\nX-End: 1\r\nContent-Length: 2\r\n\r\n{}"
	rs := exchange(t, fl.Addr().String(), raw, 1)
	if len(rs) != 1 || rs[0].StatusCode != 200 {
		t.Fatalf("responses %v", rs)
	}
	body, _ := io.ReadAll(rs[0].Body)
	if strings.Count(string(body), "\n") != 3 {
		t.Errorf("body %q; want 3 lines", body)
	}
	h := <-seen
	for _, k := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization", "Connection"} {
		if h.Get(k) != "" {
			t.Errorf("the server got hop-by-hop %s: %q", k, h.Get(k))
		}
	}
	if h.Get("X-End") != "1" {
		t.Errorf("the server did not get the end-to-end X-End: %v", h)
	}
}

// TestModelForwardGuestGone: a guest that goes away while the model server thinks ends the
// server's request (the model stops working for nobody), past watchAfter.
func TestModelForwardGuestGone(t *testing.T) {
	e := newEnv(t, 0)
	started, ended := make(chan struct{}), make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // (the server watches its client once the body is read)
		close(started)
		select {
		case <-r.Context().Done():
			close(ended)
		case <-time.After(waitFor):
		}
	})}
	c := dialThrough(t, e, srv)
	io.WriteString(c, "POST /api/generate HTTP/1.1\r\nHost: m\r\nContent-Length: 2\r\n\r\n{}")
	within(t, started, waitFor, "the request to reach the server")
	time.Sleep(watchAfter + 100*time.Millisecond) // not ordering: the guest leaves past watchAfter, the time the forward measures (a late watch finds the end all the same)
	c.Close()
	within(t, ended, 2*time.Second, "the server's request to end after the guest left")
}
