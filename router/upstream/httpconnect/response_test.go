package httpconnect_test

import (
	"errors"
	"io"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/agentcage/router/router/upstream/httpconnect"
)

// banner stands for the target's first bytes, which follow the head.
const banner = "SSH-2.0-OpenSSH_9.6\r\n"

// Heads of answers real proxies give.
const (
	squid200     = "HTTP/1.1 200 Connection established\r\n\r\n"
	tinyproxy200 = "HTTP/1.0 200 Connection established\r\nProxy-agent: tinyproxy/1.11.1\r\n\r\n"
	squid407     = "HTTP/1.1 407 Proxy Authentication Required\r\nServer: squid/5.7\r\n" +
		"Proxy-Authenticate: Basic realm=\"proxy\"\r\nContent-Type: text/html\r\nContent-Length: 3520\r\n\r\n"
)

func TestParseResponse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want httpconnect.Response
	}{
		{"squid-200", squid200, httpconnect.Response{Proto: "HTTP/1.1", StatusCode: 200, Reason: "Connection established"}},
		{"tinyproxy-200", tinyproxy200, httpconnect.Response{Proto: "HTTP/1.0", StatusCode: 200, Reason: "Connection established",
			Header: textproto.MIMEHeader{"Proxy-Agent": {"tinyproxy/1.11.1"}}}},
		{"squid-407", squid407, httpconnect.Response{Proto: "HTTP/1.1", StatusCode: 407, Reason: "Proxy Authentication Required",
			Header: textproto.MIMEHeader{"Server": {"squid/5.7"}, "Proxy-Authenticate": {`Basic realm="proxy"`},
				"Content-Type": {"text/html"}, "Content-Length": {"3520"}}}},
		{"shortest", "HTTP/1.1 200\r\n\r\n", httpconnect.Response{Proto: "HTTP/1.1", StatusCode: 200}},
		{"empty-reason", "HTTP/1.1 204 \r\n\r\n", httpconnect.Response{Proto: "HTTP/1.1", StatusCode: 204}},
		{"reason-obs-text-tab", "HTTP/1.1 200 d\xe9j\xe0\tvu\r\n\r\n", httpconnect.Response{Proto: "HTTP/1.1", StatusCode: 200, Reason: "d\xe9j\xe0\tvu"}},
		{"repeated-field-ows", "HTTP/1.1 200 OK\r\nvia:  1.1 a \t\r\nVIA:1.1 b\r\nX-Empty:\r\n\r\n", httpconnect.Response{Proto: "HTTP/1.1", StatusCode: 200, Reason: "OK",
			Header: textproto.MIMEHeader{"Via": {"1.1 a", "1.1 b"}, "X-Empty": {""}}}},
		{"599", "HTTP/1.1 599 x\r\n\r\n", httpconnect.Response{Proto: "HTTP/1.1", StatusCode: 599, Reason: "x"}},
		{"100", "HTTP/1.1 100 Continue\r\n\r\n", httpconnect.Response{Proto: "HTTP/1.1", StatusCode: 100, Reason: "Continue"}},
		{"http-1.9", "HTTP/1.9 200 OK\r\n\r\n", httpconnect.Response{Proto: "HTTP/1.9", StatusCode: 200, Reason: "OK"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := httpconnect.ParseResponse([]byte(tt.in))
			if err != nil {
				t.Fatalf("ParseResponse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseResponseInvalid(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"empty", "", "response: head does not end at its first empty line"},
		{"no-end", "HTTP/1.1 200 OK\r\n", "response: head does not end at its first empty line"},
		{"bytes-after-end", squid200 + "x", "response: head does not end at its first empty line"},
		{"only-end", "\r\n\r\n", `response: status line: "" is too short`},
		{"bare-lf-status", "HTTP/1.1 200 OK\n\r\n\r\n", `response: line 1 has a bare '\n' (lines end in CRLF)`},
		{"bare-cr-field", "HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n", `response: line 2 has a bare '\r' (lines end in CRLF)`},
		{"http-2", "HTTP/2.0 200 OK\r\n\r\n", `response: status line: version "HTTP/2.0", want HTTP/1.x`},
		{"not-http", "HTTX/1.1 200 OK\r\n\r\n", `response: status line: version "HTTX/1.1" is not HTTP/digit.digit`},
		{"version-letters", "HTTP/a.b 200 OK\r\n\r\n", `response: status line: version "HTTP/a.b" is not HTTP/digit.digit`},
		{"no-space", "HTTP/1.1_200 OK\r\n\r\n", "response: status line: no space after the version"},
		{"code-short", "HTTP/1.1 20\r\n\r\n", `response: status line: "HTTP/1.1 20" is too short`},
		{"code-letters", "HTTP/1.1 2x0 OK\r\n\r\n", `response: status line: status "2x0" is not a code from 100 to 599`},
		{"code-600", "HTTP/1.1 600 OK\r\n\r\n", `response: status line: status "600" is not a code from 100 to 599`},
		{"code-099", "HTTP/1.1 099 OK\r\n\r\n", `response: status line: status "099" is not a code from 100 to 599`},
		{"code-4-digits", "HTTP/1.1 2000 OK\r\n\r\n", `response: status line: no space after the status "200"`},
		{"reason-nul", "HTTP/1.1 200 O\x00K\r\n\r\n", "response: status line: reason has control byte 0x00"},
		{"fold", "HTTP/1.1 200 OK\r\nVia: a\r\n b\r\n\r\n", "response: line 3: obsolete line folding (a line starting with whitespace)"},
		{"no-colon", "HTTP/1.1 200 OK\r\nVia a\r\n\r\n", "response: line 2: header line has no colon"},
		{"empty-name", "HTTP/1.1 200 OK\r\n: a\r\n\r\n", "response: line 2: empty field name"},
		{"space-before-colon", "HTTP/1.1 200 OK\r\nVia : a\r\n\r\n", `response: line 2: field name "Via " has byte 0x20, which a token cannot have`},
		{"value-ctl", "HTTP/1.1 200 OK\r\nVia: a\x01\r\n\r\n", `response: line 2: field "Via" has control byte 0x01 in its value`},
		{"value-del", "HTTP/1.1 200 OK\r\nVia: a\x7f\r\n\r\n", `response: line 2: field "Via" has control byte 0x7f in its value`},
		{"too-many-lines", "HTTP/1.1 200 OK\r\n" + strings.Repeat("A: b\r\n", httpconnect.MaxHeaderLines+1) + "\r\n",
			"response: more than 100 header lines"},
		{"too-long", "HTTP/1.1 200 OK\r\nA: " + strings.Repeat("b", httpconnect.MaxResponseLen) + "\r\n\r\n",
			"response: head of 16408 bytes, longer than 16384"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := httpconnect.ParseResponse([]byte(tt.in))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
			if !reflect.DeepEqual(got, httpconnect.Response{}) {
				t.Errorf("Response %+v with an error, want the zero Response", got)
			}
		})
	}
	// The line limit counts header lines: exactly MaxHeaderLines pass.
	in := "HTTP/1.1 200 OK\r\n" + strings.Repeat("A: b\r\n", httpconnect.MaxHeaderLines) + "\r\n"
	if got, err := httpconnect.ParseResponse([]byte(in)); err != nil || len(got.Header["A"]) != httpconnect.MaxHeaderLines {
		t.Errorf("%d header lines: %d values, %v; want all, nil", httpconnect.MaxHeaderLines, len(got.Header["A"]), err)
	}
}

// sizeReader records how many bytes each Read asks for.
type sizeReader struct {
	r     io.Reader
	sizes []int
}

func (s *sizeReader) Read(p []byte) (int, error) {
	s.sizes = append(s.sizes, len(p))
	return s.r.Read(p)
}

func TestReadResponse(t *testing.T) {
	for _, head := range []string{squid200, tinyproxy200, squid407, "HTTP/1.1 200\r\n\r\n", "HTTP/1.1 200 OK\r\nA: \r\n\r\n"} {
		for _, oneByte := range []bool{false, true} {
			src := strings.NewReader(head + banner)
			sr := &sizeReader{r: src}
			var r io.Reader = sr
			if oneByte {
				r = iotest.OneByteReader(sr)
			}
			got, err := httpconnect.ReadResponse(r)
			if err != nil {
				t.Fatalf("%q onebyte=%v: %v", head, oneByte, err)
			}
			want, _ := httpconnect.ParseResponse([]byte(head))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%q onebyte=%v: got %+v, want %+v", head, oneByte, got, want)
			}
			if rest := src.Len(); rest != len(banner) {
				t.Errorf("%q onebyte=%v: %d bytes left unread, want the banner's %d", head, oneByte, rest, len(banner))
			}
			if !oneByte {
				// At most 16 bytes first, then at most 4 at a time.
				for i, n := range sr.sizes {
					if i == 0 && n > 16 || i > 0 && n > 4 {
						t.Errorf("%q: read %d asked for %d bytes", head, i, n)
					}
				}
				t.Logf("%d-byte head read in %d reads", len(head), len(sr.sizes))
			}
		}
	}
}

// zeroReader returns 0, nil forever.
type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestReadResponseFailure(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name   string
		r      io.Reader
		want   string
		wantIs error
	}{
		{"eof", strings.NewReader(""), "read response: EOF", io.EOF},
		{"cut", strings.NewReader("HTTP/1.1 200 OK\r\n"), "read response: unexpected EOF after 17 bytes", io.ErrUnexpectedEOF},
		{"cut-in-end", strings.NewReader("HTTP/1.1 200 OK\r\n\r"), "read response: unexpected EOF after 18 bytes", io.ErrUnexpectedEOF},
		{"error", iotest.ErrReader(boom), "read response: boom", boom},
		{"error-after-data", io.MultiReader(strings.NewReader("HTTP/1.1 2"), iotest.ErrReader(boom)), "read response: boom", boom},
		{"no-progress", zeroReader{}, "read response: multiple Read calls return no data or error", io.ErrNoProgress},
		{"socks5-answer", strings.NewReader("\x05\xff"), `read response: "\x05\xff" is not the start of an HTTP response`, nil},
		{"html", strings.NewReader("<html>hello</html>\r\n\r\n"), `read response: "<html" is not the start of an HTTP response`, nil},
		{"endless", strings.NewReader("HTTP/1.1 200 OK\r\nA: " + strings.Repeat("b", 20000)), "read response: head longer than 16384 bytes", nil},
		{"bad-status", strings.NewReader("HTTP/2.0 200 OK\r\n\r\n"), `response: status line: version "HTTP/2.0", want HTTP/1.x`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := httpconnect.ReadResponse(tt.r)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v, want errors.Is %v", err, tt.wantIs)
			}
			if !reflect.DeepEqual(got, httpconnect.Response{}) {
				t.Errorf("Response %+v with an error", got)
			}
		})
	}
}
