package modelfwd

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestModelResponseFraming: what the handler writes reaches the guest framed as
// http.Server would frame it, read back with net/http's own response parser.
func TestModelResponseFraming(t *testing.T) {
	cases := []struct {
		name, req string
		write     func(w http.ResponseWriter)
		status    int
		body      string
		trailer   string // a trailer's value, "" for none
		keep      bool
	}{
		{"length kept", "GET /v1/models HTTP/1.1\r\nHost: m\r\n\r\n", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		}, 200, "hello", "", true},
		{"chunked with a trailer", "POST /api/chat HTTP/1.1\r\nHost: m\r\n\r\n", func(w http.ResponseWriter) {
			w.Header().Set("Trailer", "X-Done")
			io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			io.WriteString(w, "b")
			w.Header().Set("X-Done", "yes")
		}, 200, "ab", "yes", true},
		{"HTTP/1.0 ends the connection", "GET /v1/models HTTP/1.0\r\n\r\n", func(w http.ResponseWriter) {
			io.WriteString(w, "old")
		}, 200, "old", "", false},
		{"HEAD has no body", "HEAD /v1/models HTTP/1.1\r\nHost: m\r\n\r\n", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "5")
			w.WriteHeader(200)
		}, 200, "", "", true},
		{"204", "POST /api/chat HTTP/1.1\r\nHost: m\r\n\r\n", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusNoContent)
		}, 204, "", "", true},
		{"short of its length", "GET /v1/models HTTP/1.1\r\nHost: m\r\n\r\n", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "half")
		}, 200, "", "", false},
		{"the guest asks to close", "GET /v1/models HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n", func(w http.ResponseWriter) {
			io.WriteString(w, "bye")
		}, 200, "bye", "", false},
		{"nothing written", "GET /v1/models HTTP/1.1\r\nHost: m\r\n\r\n", func(w http.ResponseWriter) {}, 200, "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(c.req)))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			w := &modelResponse{bw: bufio.NewWriter(&out), req: req, h: http.Header{}}
			c.write(w)
			keep := w.finish()
			if keep != c.keep {
				t.Errorf("keep %v; want %v", keep, c.keep)
			}
			resp, err := http.ReadResponse(bufio.NewReader(&out), req)
			if err != nil {
				t.Fatalf("%q: %v", out.String(), err)
			}
			body, err := io.ReadAll(resp.Body)
			if resp.StatusCode != c.status || (c.name != "short of its length" && (err != nil || string(body) != c.body)) {
				t.Errorf("%d %q %v; want %d %q (wire %q)", resp.StatusCode, body, err, c.status, c.body, out.String())
			}
			if got := resp.Trailer.Get("X-Done"); got != c.trailer {
				t.Errorf("trailer %q; want %q", got, c.trailer)
			}
		})
	}
}

type noDeadline struct{}

func (noDeadline) SetReadDeadline(time.Time) error { return nil }

// FuzzReadModelRequest: whatever a guest sends, reading it ends in a request, a refusal or
// the connection's end, never a panic; a request read has an unambiguous head and a body
// net/http framed. Its seeds: testdata/fuzz/FuzzReadModelRequest.
func FuzzReadModelRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(b), maxModelHead)
		for range 8 {
			req, why, err := readModelRequest(noDeadline{}, br, 0)
			if err != nil || why != "" {
				return
			}
			if req.ProtoMajor != 1 {
				t.Fatalf("passed %s", req.Proto)
			}
			io.Copy(io.Discard, req.Body)
		}
	})
}
