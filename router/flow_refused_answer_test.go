package router

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/rules"
)

// refusePaths are the set-up paths a transparent flow may take: the event loops' (Linux) and
// the goroutines'. Each refusal test runs on both.
var refusePaths = []struct {
	name      string
	goroutine bool
}{{"loop", false}, {"goroutine", true}}

// cagedEnv is a router whose flows from loopback are caged (a VM network), under rs.
func cagedEnv(t *testing.T, goroutine bool, rs ...rules.Rule) *env {
	t.Helper()
	return newEnv(t, Settings{Decision: decision(rs, netip.MustParsePrefix("127.0.0.0/8"))}, Options{GoroutineSetup: goroutine})
}

// TestRefusedHTTPGets403: a caged flow's refused plaintext HTTP request is answered with a
// 403 whose body says what was refused and by which rule, and how to allow it; the
// connection then ends with a FIN, not a reset, so the client reads the whole answer. On
// both paths, whether the router read the request before deciding (a rule by name: it
// sniffs the Host) or not (a rule by address), and whether the request comes whole or in
// pieces.
func TestRefusedHTTPGets403(t *testing.T) {
	target := startTarget(t, "x")
	byAddr := hostRule("no-target", rules.Block, "", target.Addr().String())
	byName := hostRule("no-blocked", rules.Block, "", "blocked.example")
	rest := rules.Rule{Name: "rest", Action: rules.Direct}
	cases := []struct {
		name   string
		rs     []rules.Rule
		pieces []string
		rule   string
		what   string
	}{
		{"by address", []rules.Rule{byAddr}, []string{"GET / HTTP/1.1\r\nHost: x.example\r\n\r\n"}, `rule #1 "no-target"`, target.String()},
		{"by address, in pieces", []rules.Rule{byAddr}, []string{"GE", "T /a HTTP/1.1\r\nHo", "st: x.example\r\n\r\n"}, `rule #1 "no-target"`, target.String()},
		{"by sniffed name", []rules.Rule{byName, rest}, []string{"GET / HTTP/1.1\r\nHost: blocked.example\r\n\r\n"}, `rule #1 "no-blocked"`, "blocked.example:" + strconv.Itoa(int(target.Port()))},
		{"no rule", nil, []string{"GET / HTTP/1.1\r\nHost: x.example\r\n\r\n"}, "caged traffic, and no rule lets it out", target.String()},
	}
	for _, path := range refusePaths {
		for _, c := range cases {
			t.Run(path.name+"/"+c.name, func(t *testing.T) {
				e := cagedEnv(t, path.goroutine, c.rs...)
				cl := e.dial(target)
				for i, p := range c.pieces {
					if i > 0 {
						time.Sleep(5 * time.Millisecond) // not ordering: a paced sender, so the pieces tend to come in separate reads (merged, they test less, not wrong)
					}
					if _, err := cl.Write([]byte(p)); err != nil {
						t.Fatalf("write: %v", err)
					}
				}
				resp, err := http.ReadResponse(bufio.NewReader(cl), nil)
				if err != nil {
					t.Fatalf("read the answer: %v", err)
				}
				body, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatalf("read the body (the router must not reset it away): %v", err)
				}
				if resp.StatusCode != http.StatusForbidden || !resp.Close { // Close: "Connection: close"
					t.Errorf("answer %s, close %v; want 403 with Connection: close", resp.Status, resp.Close)
				}
				for _, want := range []string{c.what, c.rule, "router explain", "router's config"} {
					if !strings.Contains(string(body), want) {
						t.Errorf("body %q does not say %q", body, want)
					}
				}
				if _, err := cl.Read(make([]byte, 1)); err != io.EOF {
					t.Errorf("after the answer: %v, want EOF", err)
				}
				cl.Close() // the router waits for it (bounded) before it closes its side
				e.waitLog("msg=flow ")
				if e.marked.count() != 0 {
					t.Error("a refused flow opened a connection")
				}
			})
		}
	}
}

// TestRefusedOtherBytesResetAtOnce: a refused caged flow that sends TLS or any bytes other
// than an HTTP/1 request is reset as soon as they are in, well within 100 ms (not after the
// wait for a client's first bytes); one that sends nothing (a protocol whose server speaks
// first) is reset once that wait is over.
func TestRefusedOtherBytesResetAtOnce(t *testing.T) {
	target := startTarget(t, "x")
	no := hostRule("no-target", rules.Block, "", target.Addr().String())
	cases := []struct {
		name  string
		first func(t *testing.T) []byte
		max   time.Duration
	}{
		{"tls", func(t *testing.T) []byte { return clientHello(t, "x.example") }, 100 * time.Millisecond},
		{"ssh", func(*testing.T) []byte { return []byte("SSH-2.0-OpenSSH_9.6\r\n") }, 100 * time.Millisecond},
		{"http/2", func(*testing.T) []byte { return []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") }, 100 * time.Millisecond},
		{"silent", func(*testing.T) []byte { return nil }, sniffWait + time.Second},
	}
	for _, path := range refusePaths {
		for _, c := range cases {
			t.Run(path.name+"/"+c.name, func(t *testing.T) {
				e := cagedEnv(t, path.goroutine, no)
				first := c.first(t)
				cl := e.dial(target)
				start := time.Now()
				if len(first) > 0 {
					if _, err := cl.Write(first); err != nil {
						t.Fatalf("write: %v", err)
					}
				}
				n, err := cl.Read(make([]byte, 1))
				took := time.Since(start)
				if n != 0 || !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("read = %d, %v; want a reset", n, err)
				}
				if took > c.max {
					t.Errorf("reset after %v, want within %v", took, c.max)
				}
				if c.name == "silent" && took < sniffWait/2 {
					t.Errorf("a silent client was reset after %v, before the wait for its first bytes", took)
				}
				t.Logf("reset after %v", took)
			})
		}
	}
}

// TestRefusedUncagedStillResets: a flow that is not caged (the host's own) is refused with a
// reset, as before, even when it speaks HTTP: the answer is for the cage's guests.
func TestRefusedUncagedStillResets(t *testing.T) {
	target := startTarget(t, "x")
	for _, path := range refusePaths {
		t.Run(path.name, func(t *testing.T) {
			e := newEnv(t, Settings{Decision: mustRules(t, hostRule("no", rules.Block, "", target.Addr().String()))}, Options{GoroutineSetup: path.goroutine})
			cl := e.dial(target)
			cl.Write([]byte("GET / HTTP/1.1\r\nHost: x.example\r\n\r\n"))
			wantReset(t, cl)
		})
	}
}

// TestInboundHTTPRefusalSaysWhy: the HTTP inbound's 403 for a CONNECT the rules refuse says
// what was refused and why in the words of the transparent path's 403.
func TestInboundHTTPRefusalSaysWhy(t *testing.T) {
	e, _, port := blockingEnv(t)
	httpAddr := e.startInbound(Inbound{Type: InboundHTTP})
	dst := "blocked.lab.test:" + strconv.Itoa(int(port))
	c := e.dialInbound(httpAddr)
	io.WriteString(c, "CONNECT "+dst+" HTTP/1.1\r\nHost: "+dst+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"router: " + dst + " refused", `rule #1 "no" blocks it`, "router explain"} {
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), want) {
			t.Errorf("answer %s %q; want 403 saying %q", resp.Status, body, want)
		}
	}
}
