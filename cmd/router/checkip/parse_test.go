package checkip

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestParseEcho(t *testing.T) {
	tests := []struct {
		name, body, want string // want "" means an error
	}{
		{"plain v4", "203.0.113.7", "203.0.113.7"},
		{"plain v4 newline", "203.0.113.7\n", "203.0.113.7"},
		{"plain v4 whitespace", " \t\r\n203.0.113.7 \r\n\n", "203.0.113.7"},
		{"plain v6", "2001:db8::7\n", "2001:db8::7"},
		{"byte order mark", "\xef\xbb\xbf198.51.100.1\n", "198.51.100.1"},
		{"v4-mapped becomes v4", "::ffff:192.0.2.1", "192.0.2.1"},
		{"loopback", "127.0.0.1", "127.0.0.1"},
		{"cloudflare trace", "fl=123\nh=www.cloudflare.com\nip=198.51.100.9\nts=1.5\nvisit_scheme=https\n", "198.51.100.9"},
		{"trace v6", "fl=1\nip=2001:db8::9\n", "2001:db8::9"},
		{"json ip", `{"ip":"203.0.113.7"}`, "203.0.113.7"},
		{"json ip spaced", " {\n  \"ip\" : \"203.0.113.7\"\n}\n", "203.0.113.7"},
		{"json IP upper", `{"IP":"203.0.113.7"}`, "203.0.113.7"},
		{"json origin", `{"origin":"203.0.113.7"}`, "203.0.113.7"},
		{"json origin chain", `{"origin":"203.0.113.7, 10.0.0.1"}`, "203.0.113.7"},
		{"json address", `{"address":"2001:db8::1"}`, "2001:db8::1"},
		{"json ip_addr", `{"ip_addr":"203.0.113.7","user_agent":"x"}`, "203.0.113.7"},
		{"json ip-api query", `{"status":"success","country":"X","query":"203.0.113.7"}`, "203.0.113.7"},
		{"json client_ip", `{"client_ip":"203.0.113.7"}`, "203.0.113.7"},
		{"json remote_addr port", `{"remote_addr":"203.0.113.7:51234"}`, "203.0.113.7"},
		{"json remote_addr v6 port", `{"remote_addr":"[2001:db8::1]:443"}`, "2001:db8::1"},
		{"json nested", `{"address":{"ip":"203.0.113.7"}}`, "203.0.113.7"},
		{"json ip wins over origin", `{"origin":"192.0.2.2","ip":"203.0.113.7"}`, "203.0.113.7"},
		{"json unrelated then ip", `{"a":[1,2,{"b":null}],"ip":"203.0.113.7"}`, "203.0.113.7"},
		{"empty", "", ""},
		{"spaces", " \n\t", ""},
		{"html", "<html><body>Your IP is 203.0.113.7</body></html>", ""},
		{"two addresses", "203.0.113.7 203.0.113.8", ""},
		{"prefix", "203.0.113.0/24", ""},
		{"hostname", "example.com", ""},
		{"zone", "fe80::1%eth0", ""},
		{"unspecified", "0.0.0.0", ""},
		{"multicast", "ff02::1", ""},
		{"trace bad ip", "ip=nonsense\n", ""},
		{"json no key", `{"country":"ZZ"}`, ""},
		{"json number", `{"ip":12345}`, ""},
		{"json bad value", `{"ip":"not an ip"}`, ""},
		{"json broken", `{"ip":"203.0.113.7"`, ""},
		{"json trailing", `{"ip":"203.0.113.7"} {}`, ""},
		{"json array", `["203.0.113.7"]`, ""},
		{"json deep nesting not followed", `{"address":{"address":{"ip":"203.0.113.7"}}}`, ""},
		{"binary", "\x00\x01\x02\xff", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEcho([]byte(tt.body))
			if tt.want == "" {
				if err == nil {
					t.Fatalf("ParseEcho(%q) = %v, want an error", tt.body, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseEcho(%q): %v", tt.body, err)
			}
			if got.String() != tt.want {
				t.Errorf("ParseEcho(%q) = %v, want %s", tt.body, got, tt.want)
			}
		})
	}
}

func TestParseEchoErrorIsPrintable(t *testing.T) {
	_, err := ParseEcho([]byte("\x1b]0;owned\x07\x1b[2J" + strings.Repeat("x", 1000)))
	if err == nil {
		t.Fatal("want an error")
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\x1b\x07") {
		t.Errorf("error carries control bytes: %q", msg)
	}
	if len(msg) > 120 {
		t.Errorf("error is %d bytes long, want a short snippet: %q", len(msg), msg)
	}
}

func TestParseModels(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string // nil with wantErr
		wantErr    bool
	}{
		{"openai", `{"object":"list","data":[{"id":"qwen2.5-coder-32b","object":"model","owned_by":"me"},{"id":"llama3"}]}`,
			[]string{"qwen2.5-coder-32b", "llama3"}, false},
		{"openai spaced", "\n { \"data\" : [ { \"id\" : \"m\" } ] }\n", []string{"m"}, false},
		{"openai duplicates and empty", `{"data":[{"id":"a"},{"id":""},{"id":"a"},{"id":"b"},{}]}`, []string{"a", "b"}, false},
		{"openai empty list", `{"object":"list","data":[]}`, []string{}, false},
		{"bare array", `[{"id":"a"},{"id":"b"}]`, []string{"a", "b"}, false},
		{"ollama tags", `{"models":[{"name":"llama3:8b","model":"llama3:8b","size":1},{"model":"qwen:7b"}]}`,
			[]string{"llama3:8b", "qwen:7b"}, false},
		{"data wins over models", `{"data":[{"id":"a"}],"models":[{"name":"b"}]}`, []string{"a"}, false},
		{"byte order mark", "\xef\xbb\xbf{\"data\":[{\"id\":\"a\"}]}", []string{"a"}, false},
		{"neither", `{"object":"list"}`, nil, true},
		{"data null", `{"data":null}`, nil, true},
		{"data wrong type", `{"data":"qwen"}`, nil, true},
		{"id wrong type", `{"data":[{"id":7}]}`, nil, true},
		{"html", `<html>502 Bad Gateway</html>`, nil, true},
		{"empty", ``, nil, true},
		{"truncated", `{"data":[{"id":"a"}`, nil, true},
		{"error object", `{"error":{"message":"unauthorized"}}`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseModels([]byte(tt.body))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseModels(%q) = %q, want an error", tt.body, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseModels(%q): %v", tt.body, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("ParseModels(%q) = %q, want %q", tt.body, got, tt.want)
			}
		})
	}
}

func TestModelURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"10.0.2.2:47831", "http://10.0.2.2:47831/v1/models"},
		{"http://10.0.2.2:47831", "http://10.0.2.2:47831/v1/models"},
		{"http://10.0.2.2:47831/", "http://10.0.2.2:47831/v1/models"},
		{"http://10.0.2.2:47831/v1", "http://10.0.2.2:47831/v1/models"},
		{"http://10.0.2.2:47831/v1/", "http://10.0.2.2:47831/v1/models"},
		{"http://10.0.2.2:47831/v1/models", "http://10.0.2.2:47831/v1/models"},
		{"https://host.example/openai", "https://host.example/openai/v1/models"},
		{"https://host.example/openai/v1", "https://host.example/openai/v1/models"},
		{"http://10.0.2.2:11434/api/tags", "http://10.0.2.2:11434/api/tags"},
		{"http://[fd00::2]:47831", "http://[fd00::2]:47831/v1/models"},
		{"localhost:1234/v1?x=1", "http://localhost:1234/v1/models?x=1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ModelURL(tt.in)
			if err != nil {
				t.Fatalf("ModelURL(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ModelURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	for _, bad := range []string{"", "ftp://host/", "http://", "http://[::1", "://x"} {
		t.Run("bad "+bad, func(t *testing.T) {
			if got, err := ModelURL(bad); err == nil {
				t.Errorf("ModelURL(%q) = %q, want an error", bad, got)
			}
		})
	}
}

// countingReader is an endless stream of '1' that counts what was read from it.
type countingReader struct{ n int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '1'
	}
	c.n += int64(len(p))
	return len(p), nil
}

func TestReadBounded(t *testing.T) {
	t.Run("at the bound", func(t *testing.T) {
		b, err := readBounded(bytes.NewReader(make([]byte, 100)), 100)
		if err != nil || len(b) != 100 {
			t.Errorf("got %d bytes, %v; want 100, nil", len(b), err)
		}
	})
	t.Run("one past the bound", func(t *testing.T) {
		if _, err := readBounded(bytes.NewReader(make([]byte, 101)), 100); err == nil {
			t.Error("want an error")
		}
	})
	t.Run("endless stream", func(t *testing.T) {
		c := &countingReader{}
		if _, err := readBounded(io.Reader(c), MaxEchoBody); err == nil {
			t.Fatal("want an error")
		}
		// io.ReadAll grows its buffer, so it may ask for a little more than it keeps, but the
		// limit reader hands out at most max+1 bytes.
		if c.n > 2*MaxEchoBody {
			t.Errorf("read %d bytes from an endless body, want about %d", c.n, MaxEchoBody+1)
		}
	})
}

func TestClean(t *testing.T) {
	got := clean("ok model\x1b[31m\x00é\xff")
	want := "ok model\uFFFD[31m\uFFFDé\uFFFD"
	if got != want {
		t.Errorf("clean = %q, want %q", got, want)
	}
}
