package httpconnect_test

// Seeds: the f.Add calls below; a crasher found by fuzzing is kept as a
// seed in testdata/fuzz/FuzzReadResponse.
// Run: go test -run '^$' -fuzz=FuzzReadResponse -fuzztime=2m ./httpconnect/

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/agentcage/router/router/upstream/httpconnect"
)

func FuzzReadResponse(f *testing.F) {
	for _, seed := range []string{
		squid200, tinyproxy200, squid407, "HTTP/1.1 200\r\n\r\n", "HTTP/1.1 200 OK\r\nVia: a\r\n b\r\n\r\n",
		"HTTP/1.1 200 OK\n\n", "HTTP/1.0 502 Bad Gateway\r\nA:b\r\nA: c \r\n\r\nbody", "\x05\x00",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := bytes.NewReader(data)
		resp, err := httpconnect.ReadResponse(src)
		read := len(data) - src.Len()
		if read > httpconnect.MaxResponseLen {
			t.Fatalf("read %d bytes, more than a head may have", read)
		}
		if err != nil {
			if !reflect.DeepEqual(resp, httpconnect.Response{}) {
				t.Fatalf("Response %+v with error %v", resp, err)
			}
			if (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && read != len(data) {
				t.Fatalf("truncation error %v with %d bytes unread", err, len(data)-read)
			}
			if !strings.HasPrefix(err.Error(), "read response: ") && !strings.HasPrefix(err.Error(), "response: ") {
				t.Fatalf("error %q names no step", err)
			}
		} else {
			head := data[:read]
			if i := bytes.Index(head, []byte("\r\n\r\n")); i != read-4 {
				t.Fatalf("head % q does not end at its first empty line", head)
			}
			again, perr := httpconnect.ParseResponse(head)
			if perr != nil || !reflect.DeepEqual(again, resp) {
				t.Fatalf("ParseResponse of the head read: %+v, %v; want %+v", again, perr, resp)
			}
			checkResponse(t, resp)
			// Written out again, the response parses to the same value.
			out := render(resp)
			back, berr := httpconnect.ParseResponse([]byte(out))
			if berr != nil || !reflect.DeepEqual(back, resp) {
				t.Fatalf("rendered %q parses as %+v, %v; want %+v", out, back, berr, resp)
			}
		}

		// The result depends on the bytes read only: the same prefix, read
		// one byte at a time and followed by other bytes, gives the same
		// answer and leaves the other bytes unread.
		if err == nil {
			more := append(append([]byte(nil), data[:read]...), banner...)
			src2 := bytes.NewReader(more)
			resp2, err2 := httpconnect.ReadResponse(iotest.OneByteReader(src2))
			if err2 != nil || !reflect.DeepEqual(resp2, resp) {
				t.Fatalf("one byte at a time: %+v, %v; want %+v", resp2, err2, resp)
			}
			if src2.Len() != len(banner) {
				t.Fatalf("one byte at a time: %d bytes left, want %d", src2.Len(), len(banner))
			}
		}
	})
}

// checkResponse checks what a parsed response may hold.
func checkResponse(t *testing.T, resp httpconnect.Response) {
	t.Helper()
	if resp.StatusCode < 100 || resp.StatusCode > 599 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if !strings.HasPrefix(resp.Proto, "HTTP/1.") || len(resp.Proto) != 8 {
		t.Fatalf("proto %q", resp.Proto)
	}
	bad := func(s string) bool { return strings.ContainsAny(s, "\r\n\x00") }
	if bad(resp.Reason) {
		t.Fatalf("reason %q", resp.Reason)
	}
	n := 0
	for k, vs := range resp.Header {
		if k == "" || strings.ContainsAny(k, " \t:\r\n") {
			t.Fatalf("field name %q", k)
		}
		for _, v := range vs {
			n++
			if bad(v) || strings.TrimSpace(v) != v && strings.Trim(v, " \t") != v {
				t.Fatalf("field %q value %q", k, v)
			}
		}
	}
	if n > httpconnect.MaxHeaderLines {
		t.Fatalf("%d header values", n)
	}
}

// render writes resp out as a head, its fields sorted by name.
func render(resp httpconnect.Response) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %03d", resp.Proto, resp.StatusCode)
	if resp.Reason != "" {
		b.WriteString(" " + resp.Reason)
	}
	b.WriteString("\r\n")
	keys := make([]string, 0, len(resp.Header))
	for k := range resp.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range resp.Header[k] {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	b.WriteString("\r\n")
	return b.String()
}
