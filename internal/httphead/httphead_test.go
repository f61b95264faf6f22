package httphead

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestRead reads one head of each kind: a request, each refusal and the connection's end.
func TestRead(t *testing.T) {
	const size = 256 // bufio's smallest buffer is 16 bytes; a head longer than this is refused
	for _, tc := range []struct {
		name, in, why string
		err           error
	}{
		{"a request", "GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n", "", nil},
		{"a bare LF head", "GET /x HTTP/1.1\nHost: a.example\n\n", "", nil},
		{"no Host on HTTP/1.0", "GET /x HTTP/1.0\r\n\r\n", "", nil},
		{"too large", "GET /" + strings.Repeat("x", size) + " HTTP/1.1\r\n\r\n", "the request head is larger than 256 bytes", nil},
		{"two lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", "two Content-Length fields: the body length is ambiguous", nil},
		{"malformed", "GET\r\n\r\n", "a malformed request", nil},
		{"HTTP/2", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", "an HTTP version other than 1.x", nil},
		{"a bad Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "a malformed Host header", nil},
		{"the end before a head", "", "", io.EOF},
		{"the end within a head", "GET / HTTP/1.1\r\nHost: a\r\n", "", io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, why, err := Read(bufio.NewReaderSize(strings.NewReader(tc.in), size))
			if why != tc.why || !errors.Is(err, tc.err) {
				t.Fatalf("Read = why %q, err %v; want %q, %v", why, err, tc.why, tc.err)
			}
			if (req != nil) != (tc.why == "" && tc.err == nil) {
				t.Fatalf("Read = request %v with why %q, err %v", req, why, err)
			}
		})
	}
}

// TestReadLeavesTheBody reads two requests in a row: the first one's body is left for the
// caller, and the second head follows it.
func TestReadLeavesTheBody(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhiGET /b HTTP/1.1\r\nHost: a\r\n\r\n"), 256)
	req, why, err := Read(br)
	if req == nil {
		t.Fatalf("first request: why %q, err %v", why, err)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil || string(body) != "hi" {
		t.Fatalf("first body = %q, %v; want hi", body, err)
	}
	req, why, err = Read(br)
	if req == nil || req.URL.Path != "/b" {
		t.Fatalf("second request = %v, why %q, err %v; want /b", req, why, err)
	}
}
