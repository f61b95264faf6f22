package modelapi

import (
	"strings"
	"testing"
)

func defaultPolicy(t testing.TB) *Policy {
	p, err := New(Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCheck: the management calls are refused however the path is spelled; the inference
// calls pass, sent on in the allow-list's spelling.
func TestCheck(t *testing.T) {
	p := defaultPolicy(t)
	const host = "10.0.2.2:47831"
	for _, c := range []struct {
		method, target string
		want           string // the path sent on; "" for refused
	}{
		{"GET", "/v1/models", "/v1/models"},
		{"HEAD", "/v1/models", "/v1/models"},
		{"GET", "/v1/models/llama3:8b", "/v1/models/llama3:8b"},
		{"POST", "/v1/chat/completions", "/v1/chat/completions"},
		{"POST", "/v1/chat/completions?stream=1", "/v1/chat/completions"},
		{"POST", "/v1/completions", "/v1/completions"},
		{"POST", "/v1/embeddings", "/v1/embeddings"},
		{"POST", "/v1/responses", "/v1/responses"},
		{"POST", "/api/chat", "/api/chat"},
		{"POST", "/api/generate", "/api/generate"},
		{"POST", "/api/embed", "/api/embed"},
		{"POST", "/api/embeddings", "/api/embeddings"},
		{"GET", "/api/tags", "/api/tags"},
		{"POST", "/api/show", "/api/show"},
		{"GET", "/api/ps", "/api/ps"},
		{"GET", "/api/version", "/api/version"},
		{"GET", "/", "/"},
		{"POST", "/api/chat/", "/api/chat"},                   // a trailing slash (gin redirects it)
		{"POST", "//api//chat", "/api/chat"},                  // doubled slashes
		{"POST", "/API/Chat", "/api/chat"},                    // case, for servers that ignore it
		{"POST", "/api/%63hat", "/api/chat"},                  // percent-encoded letters
		{"POST", "/v1/../api/chat", "/api/chat"},              // dot segments
		{"POST", "http://" + host + "/api/chat", "/api/chat"}, // absolute-form, this host

		// The management calls, plain and hidden.
		{"POST", "/api/pull", ""},
		{"POST", "/api/push", ""},
		{"POST", "/api/create", ""},
		{"DELETE", "/api/delete", ""},
		{"POST", "/api/copy", ""},
		{"POST", "/api/blobs/sha256:00", ""},
		{"POST", "/api/experimental/web_fetch", ""},
		{"POST", "/api/chat/../pull", ""},
		{"POST", "/api/./pull", ""},
		{"POST", "/api/%2e%2e/api/pull", ""},
		{"POST", "/api/%2E%2E/api/pull", ""},
		{"POST", "/api/chat/%2e%2e/pull", ""},
		{"POST", "/api/%70ull", ""},
		{"POST", "/api%2fpull", ""},
		{"POST", "//api/pull", ""},
		{"POST", "/api//pull", ""},
		{"POST", "/API/PULL", ""},
		{"POST", "/api/pull/", ""},
		{"POST", "/api/pull?x=/api/chat", ""},
		{"POST", "/api/%252e%252e/pull", ""},          // encoded twice: refused, not guessed
		{"POST", "/api\\pull", ""},                    // a backslash
		{"POST", "/api/chat;/../pull", ""},            // path parameters
		{"POST", "/../api/chat", ""},                  // above the root
		{"POST", "/api/chat%00", ""},                  // a NUL
		{"POST", "/api/chat#frag", ""},                // a fragment
		{"POST", "http://other.example/api/chat", ""}, // absolute-form, another host
		{"POST", "https://" + host + "/api/chat", ""},
		{"POST", "http://user@" + host + "/api/chat", ""},
		{"CONNECT", host, ""},
		{"OPTIONS", "*", ""},
		{"post", "/api/chat", ""}, // methods are case-sensitive
		{"GET", "/api/chat", ""},  // the wrong method
		{"PUT", "/v1/models", ""},
		{"DELETE", "/v1/models/x", ""},
		{"GET", "/v1/models/", "/v1/models"}, // the trailing slash dropped, not a model id
	} {
		t.Run(c.method+" "+c.target, func(t *testing.T) {
			v := p.Check(c.method, c.target, host)
			if v.Path != c.want || v.OK() != (c.want != "") {
				t.Errorf("Check(%s %s) = %+v; want path %q", c.method, c.target, v, c.want)
			}
		})
	}
}

func TestLists(t *testing.T) {
	for _, c := range []struct {
		kinds  []Kind
		call   string
		passes bool
	}{
		{[]Kind{OpenAI}, "GET /v1/models", true},
		{[]Kind{OpenAI}, "POST /api/chat", false},
		{[]Kind{Ollama}, "POST /api/chat", true},
		{[]Kind{Ollama}, "POST /v1/chat/completions", true},
		{[]Kind{LMStudio}, "POST /api/v0/chat/completions", true},
		{[]Kind{LMStudio}, "GET /api/v0/models/qwen2.5-7b", true},
		{[]Kind{LMStudio}, "POST /api/v1/models/download", false},
		{[]Kind{LMStudio}, "POST /api/v1/models/load", false},
		{[]Kind{LMStudio}, "POST /api/v1/chat", false},
		{[]Kind{LMStudio}, "POST /api/chat", false},
		{[]Kind{OpenAI, LMStudio}, "POST /v1/embeddings", true},
	} {
		p, err := New(c.kinds, nil)
		if err != nil {
			t.Fatal(err)
		}
		m, path, _ := strings.Cut(c.call, " ")
		if got := p.Check(m, path, "h").OK(); got != c.passes {
			t.Errorf("%v: %s passes %v; want %v", c.kinds, c.call, got, c.passes)
		}
	}
	if _, err := New([]Kind{Ollama, TCP}, nil); err == nil {
		t.Error("tcp in a list compiled")
	}
	var zero *Policy
	if zero.Check("GET", "/v1/models", "h").OK() {
		t.Error("a nil Policy passed a call")
	}
}

func TestAllowPaths(t *testing.T) {
	for _, c := range []struct {
		entry string
		err   bool
	}{
		{"POST /v1/rerank", false},
		{"/v1/rerank", false},
		{"GET /api/v0/models/*", false},
		{"post /v1/rerank", true},
		{"FETCH /v1/rerank", true},
		{"v1/rerank", true},
		{"/v1//rerank", true},
		{"/v1/rerank/", true},
		{"/v1/../api/pull", true},
		{"/v1/%2e", true},
	} {
		_, err := ParseRoute(c.entry)
		if (err != nil) != c.err {
			t.Errorf("ParseRoute(%q) error %v; want error %v", c.entry, err, c.err)
		}
	}
	rs, _ := ParseRoute("POST /v1/rerank")
	more, _ := ParseRoute("/api/custom/*")
	p, err := New([]Kind{OpenAI}, append(rs, more...))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		call   string
		passes bool
	}{
		{"POST /v1/rerank", true},
		{"GET /v1/rerank", false},
		{"GET /api/custom/a/b", true},
		{"POST /api/custom/a", true},
		{"GET /api/custom", false},
		{"GET /api/custom/../pull", false},
	} {
		m, path, _ := strings.Cut(c.call, " ")
		if got := p.Check(m, path, "h").OK(); got != c.passes {
			t.Errorf("%s passes %v; want %v", c.call, got, c.passes)
		}
	}
}

// TestFraming: every head whose body length or fields two parsers could read apart.
func TestFraming(t *testing.T) {
	for _, c := range []struct {
		name, head string
		refused    bool
	}{
		{"plain", "POST /api/chat HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n", false},
		{"chunked", "POST /api/chat HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"bare LF", "GET / HTTP/1.1\nHost: h\n\n", false},
		{"CL and TE", "POST /api/chat HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"TE and CL, lower case", "POST /api/chat HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n", true},
		{"two CL", "POST /api/chat HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", true},
		{"two CL differing", "POST /api/chat HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 50\r\n\r\n", true},
		{"CL list", "POST /api/chat HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n", true},
		{"two TE", "POST /api/chat HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"TE gzip", "POST /api/chat HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", true},
		{"TE identity", "POST /api/chat HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", true},
		{"obs-fold", "POST /api/chat HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\n", true},
		{"obs-fold tab", "POST /api/chat HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\t0\r\n\r\n", true},
		{"bare CR", "POST /api/chat HTTP/1.1\r\nHost: h\rContent-Length: 9\r\n\r\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Framing([]byte(c.head))
			if (got != "") != c.refused {
				t.Errorf("Framing = %q; want refused %v", got, c.refused)
			}
			if end := HeadEnd([]byte(c.head + "BODY")); end != len(c.head) {
				t.Errorf("HeadEnd = %d; want %d", end, len(c.head))
			}
		})
	}
	if HeadEnd([]byte("GET / HTTP/1.1\r\nHost: h\r\n")) != -1 {
		t.Error("HeadEnd found the end of an incomplete head")
	}
}

func TestNormalizeIsIdempotent(t *testing.T) {
	for _, s := range []string{"/", "/a/b", "//a/./b/../c/", "/%41/%2f/x"} {
		n, err := Normalize(s)
		if err != nil {
			t.Fatalf("Normalize(%q): %v", s, err)
		}
		if m, err := Normalize(n); err != nil || m != n {
			t.Errorf("Normalize(%q) = %q, again %q, %v", s, n, m, err)
		}
	}
}
