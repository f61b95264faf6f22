package modelapi

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzCheck: whatever the target, a call that passes is sent on with a path that is already
// normal, that the policy passes again as is, and that no decoding, dot segment or slash
// can turn into another call: it has no percent sign, no dot segment, no doubled slash.
// And a management call never passes, however spelled.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"/api/chat", "/api/%2e%2e/pull", "//api/pull", "/v1/models/x", "http://h/api/chat", "/API/PULL/", "/a/%252e", "*"} {
		f.Add("POST", s)
		f.Add("GET", s)
	}
	p := defaultPolicy(f)
	f.Fuzz(func(t *testing.T, method, target string) {
		v := p.Check(method, target, "h")
		if !v.OK() {
			if v.Path != "" {
				t.Fatalf("refused with a path: %+v", v)
			}
			return
		}
		if strings.ContainsAny(v.Path, "%\\;?#") || strings.Contains(v.Path, "//") ||
			strings.Contains(v.Path+"/", "/./") || strings.Contains(v.Path+"/", "/../") {
			t.Fatalf("Check(%q, %q) sends %q", method, target, v.Path)
		}
		if n, err := Normalize(v.Path); err != nil || n != v.Path {
			t.Fatalf("Check(%q, %q) sends %q, not normal (%q, %v)", method, target, v.Path, n, err)
		}
		if again := p.Check(method, (&url.URL{Path: v.Path}).EscapedPath(), "h"); again.Path != v.Path {
			t.Fatalf("the path sent, %q, checks as %+v", v.Path, again)
		}
		low := strings.ToLower(v.Path)
		for _, m := range []string{"/api/pull", "/api/push", "/api/create", "/api/delete", "/api/copy", "/api/blobs"} {
			if strings.HasPrefix(low, m) {
				t.Fatalf("Check(%q, %q) passes a management call: %q", method, target, v.Path)
			}
		}
	})
}

// FuzzFraming: Framing and HeadEnd never panic, and a head Framing passes holds at most
// one framing field.
func FuzzFraming(f *testing.F) {
	f.Add([]byte("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx"))
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		end := HeadEnd(b)
		if end < -1 || end > len(b) {
			t.Fatalf("HeadEnd = %d of %d", end, len(b))
		}
		if end < 0 {
			return
		}
		head := b[:end]
		if Framing(head) != "" {
			return
		}
		var lengths, codings int
		for i, line := range strings.Split(string(head), "\n") {
			line = strings.TrimSuffix(line, "\r")
			if i > 0 && line != "" && (line[0] == ' ' || line[0] == '\t') {
				t.Fatalf("folded line passed: %q", head)
			}
			name, _, colon := strings.Cut(line, ":")
			if i == 0 || !colon {
				continue // the request line; a line net/http refuses
			}
			switch strings.ToLower(name) {
			case "content-length":
				lengths++
			case "transfer-encoding":
				codings++
			}
		}
		if lengths+codings > 1 {
			t.Fatalf("passed %d lengths and %d codings: %q", lengths, codings, head)
		}
	})
}
