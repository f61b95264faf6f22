package modelfwd

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/modeltest"
	"github.com/agentcage/router/rules/modelapi"
	"github.com/agentcage/router/rules/refusal"
)

// forwardKinds starts an HTTP forward of api kinds (comma-separated; empty: the default)
// to the model server at addr, with a max_body of 64 MiB, and returns its address.
func forwardKinds(t *testing.T, e *env, addr, kinds string) string {
	t.Helper()
	ks := modelapi.Default()
	if kinds != "" {
		ks = nil
		for n := range strings.SplitSeq(kinds, ",") {
			k, ok := modelapi.ParseKind(n)
			if !ok {
				t.Fatalf("api %q: not a kind", n)
			}
			ks = append(ks, k)
		}
	}
	api, err := modelapi.New(ks, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := Forward{Name: "model", Listen: netip.MustParseAddrPort("127.0.0.1:0"), Connect: netip.MustParseAddrPort(addr),
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, API: api, MaxBody: 64 << 20}
	fl := e.serve(f)
	return fl.Addr().String()
}

// chunked spells body as a chunked request body in pieces of n bytes.
func chunked(body string, n int) string {
	var b strings.Builder
	for len(body) > 0 {
		k := min(n, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", k, body[:k])
		body = body[k:]
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// TestModelForwardBodies drives the table of bodies the pure check is tested with
// (modeltest.BodyCases) through the forward, each with a Content-Length and chunked, with
// Content-Types that lie: what the check passes reaches the server whole (a streamed chat
// still streams); what it refuses is a 403 counted as model-api naming the field, and the
// server never receives the whole request (on Linux, a body under the client's buffer:
// none of it).
func TestModelForwardBodies(t *testing.T) {
	e := newEnv(t, 0)
	srv := startModel(t, 3, 0)
	forwards := map[string]string{}
	refusedURI := map[string]int{} // request target of a refused request: its body's size
	var refusals uint64
	outer := t // the forwards live as long as the test, not one case
	for i, tc := range modeltest.BodyCases() {
		t.Run(tc.Name, func(t *testing.T) {
			addr, ok := forwards[tc.Kinds]
			if !ok {
				addr = forwardKinds(outer, e, srv.Addr(), tc.Kinds)
				forwards[tc.Kinds] = addr
			}
			path := tc.Path
			if path == "" {
				path = "/v1/chat/completions"
			}
			for _, framing := range []string{"length", "chunked"} {
				target := fmt.Sprintf("%s?case=%d-%s", path, i, framing)
				raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", target, addr, len(tc.Body), tc.Body)
				if framing == "chunked" {
					raw = fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n%s", target, addr, chunked(tc.Body, 1000))
				}
				rs := exchange(t, addr, raw, 1)
				if len(rs) != 1 {
					t.Fatalf("%s: %d responses; want 1", framing, len(rs))
				}
				body, _ := io.ReadAll(rs[0].Body)
				if tc.Refused == "" {
					if rs[0].StatusCode != http.StatusOK {
						t.Fatalf("%s: %s %q; want it passed", framing, rs[0].Status, body)
					}
					if path == "/v1/chat/completions" && strings.Contains(tc.Body, `"stream":true`) && !strings.Contains(string(body), "event-2") {
						t.Errorf("%s: the stream %q lacks its events", framing, body)
					}
					continue
				}
				refusals++
				refusedURI[target] = len(tc.Body)
				var got struct {
					Error struct{ Type, Reason string }
				}
				if rs[0].StatusCode != http.StatusForbidden || json.Unmarshal(body, &got) != nil || got.Error.Type != "model_api_refused" {
					t.Fatalf("%s: %s %q; want a 403 model_api_refused", framing, rs[0].Status, body)
				}
				if !strings.Contains(got.Error.Reason, tc.Refused) {
					t.Errorf("%s: reason %q; want it to name %q", framing, got.Error.Reason, tc.Refused)
				}
				if rs[0].Close == false {
					t.Errorf("%s: the connection stays open after a refused body", framing)
				}
			}
		})
	}
	// A passed request, answered only after the server logged it, then the log: no refused
	// request whole, none of a small one at all (the forward's buffer never went out).
	if rs := exchange(t, forwards[""], fmt.Sprintf("GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", forwards[""]), 1); len(rs) != 1 || rs[0].StatusCode != http.StatusOK {
		t.Fatalf("a last call: %v", rs)
	}
	for _, r := range srv.Log() {
		n, refused := refusedURI[r.RawURI]
		switch {
		case refused && r.Whole:
			t.Errorf("the server received %s whole", r.RawURI)
		case refused && n < 8<<10 && runtime.GOOS == "linux": // (net/http's Transport sends the head first)
			t.Errorf("the server received %s (%d of %d bytes of body)", r.RawURI, r.Body, n)
		}
	}
	if n := e.r.book.Count(refusal.ModelAPI); n != refusals {
		t.Errorf("%d model-api refusals counted; want %d", n, refusals)
	}
	if logs := e.logs.String(); strings.Contains(logs, "203.0.113.66") || strings.Contains(logs, "SECRET") {
		t.Error("the log quotes a refused body's value")
	}
}

// TestModelForwardBodyEncoding: a body with a Content-Encoding is refused, whatever it
// holds (a server that inflates it would read what the check did not).
func TestModelForwardBodyEncoding(t *testing.T) {
	e := newEnv(t, 0)
	srv := startModel(t, 1, 0)
	addr := forwardKinds(t, e, srv.Addr(), "llamacpp")
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	io.WriteString(zw, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://203.0.113.66/x"}}]}]}`)
	zw.Close()
	for _, coding := range []string{"gzip", "identity, gzip", "deflate"} {
		raw := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n%s", addr, coding, z.Len(), z.String())
		rs := exchange(t, addr, raw, 1)
		if len(rs) != 1 || rs[0].StatusCode != http.StatusForbidden {
			t.Fatalf("%s: %v; want one 403", coding, rs)
		}
		if body, _ := io.ReadAll(rs[0].Body); !strings.Contains(string(body), "Content-Encoding") {
			t.Errorf("%s: refusal %q; want it to name Content-Encoding", coding, body)
		}
	}
	if log := srv.Log(); len(log) != 0 {
		t.Errorf("the server received %v", log)
	}
}

// TestModelForwardBodyRefusalEnds: a refused body ends its connection: a request pipelined
// after it is never read, and a guest that asked with Expect: 100-continue is answered
// 100 Continue, then the refusal.
func TestModelForwardBodyRefusalEnds(t *testing.T) {
	e := newEnv(t, 0)
	srv := startModel(t, 1, 0)
	addr := forwardKinds(t, e, srv.Addr(), "")
	bad := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://203.0.113.66/x.png"}}]}]}`
	next := `{"model":"m","messages":[]}`
	raw := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", addr, len(bad), bad) +
		fmt.Sprintf("POST /api/chat?after HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", addr, len(next), next)
	rs := exchange(t, addr, raw, 2)
	if len(rs) != 1 || rs[0].StatusCode != http.StatusForbidden {
		t.Fatalf("responses %v; want one 403, the connection closed after it", rs)
	}

	raw = fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n%s", addr, len(bad), bad)
	rs = exchange(t, addr, raw, 2)
	if len(rs) != 2 || rs[0].StatusCode != http.StatusContinue || rs[1].StatusCode != http.StatusForbidden {
		t.Fatalf("responses %v; want 100 Continue, then 403", rs)
	}
	if log := srv.Log(); len(log) != 0 {
		t.Errorf("the server received %+v", log)
	}
}
