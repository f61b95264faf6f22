package modelapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/agentcage/router/internal/modeltest"
)

// kindsOf parses a case's kinds ("" is the default).
func kindsOf(t testing.TB, s string) []Kind {
	if s == "" {
		return Default()
	}
	var ks []Kind
	for n := range strings.SplitSeq(s, ",") {
		k, ok := ParseKind(n)
		if !ok {
			t.Fatalf("kind %q", n)
		}
		ks = append(ks, k)
	}
	return ks
}

// checkBody runs body through a fresh check of r in pieces of the sizes split gives
// (cycled; the whole body at once when empty) and returns the verdict.
func checkBody(r Reach, body []byte, split []int) error {
	c := NewBodyCheck(r)
	for i, k := 0, 0; i < len(body); k++ {
		n := len(body) - i
		if len(split) > 0 {
			n = min(n, max(1, split[k%len(split)]))
		}
		if _, err := c.Write(body[i : i+n]); err != nil {
			return err
		}
		i += n
	}
	return c.Close()
}

// TestBodyCases drives the shared table through the checker: whole, a byte at a time and
// in random pieces, with the same verdict each way.
func TestBodyCases(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range modeltest.BodyCases() {
		t.Run(tc.Name, func(t *testing.T) {
			p, err := New(kindsOf(t, tc.Kinds), nil)
			if err != nil {
				t.Fatal(err)
			}
			splits := [][]int{nil, {1}, {rng.IntN(7) + 1, rng.IntN(300) + 1, rng.IntN(5000) + 1}}
			if len(tc.Body) > 1<<16 {
				splits = splits[:1] // a byte at a time is no different, only slower
			}
			for _, split := range splits {
				err := checkBody(p.Reach(), []byte(tc.Body), split)
				switch {
				case tc.Refused == "" && err != nil:
					t.Fatalf("split %v: refused: %v; want it passed", split, err)
				case tc.Refused != "" && err == nil:
					t.Fatalf("split %v: passed; want it refused (%s)", split, tc.Refused)
				case err != nil:
					var be *BodyError
					if !errors.As(err, &be) {
						t.Fatalf("error %T %v; want a *BodyError", err, err)
					}
					if !strings.Contains(err.Error(), tc.Refused) {
						t.Errorf("split %v: refused with %q; want it to say %q", split, err, tc.Refused)
					}
					if strings.Contains(err.Error(), "203.0.113.66") || strings.Contains(err.Error(), "SECRET") {
						t.Errorf("the refusal quotes the value: %q", err)
					}
				}
			}
		})
	}
}

// TestBodyKinds: what each kind refuses, by the field it watches; the generic kind
// refuses everything any kind does.
func TestBodyKinds(t *testing.T) {
	g := Generic.Reach()
	for k := range numKinds {
		if k == TCP {
			if k.Reach() != 0 {
				t.Errorf("tcp reaches %b", k.Reach())
			}
			continue
		}
		if k.Reach()&^g != 0 {
			t.Errorf("%v watches %b that generic does not", k, k.Reach()&^g)
		}
		if k.Reach()&ReachImageURL == 0 {
			t.Errorf("%v lets image_url through", k)
		}
	}
	for _, k := range []Kind{LlamaCpp, VLLM, LMStudio} {
		if k.Reach()&^OpenAI.Reach() != 0 {
			t.Errorf("openai watches less than %v", k)
		}
	}
}

func TestURLish(t *testing.T) {
	for key, want := range map[string]bool{
		"image_url": true, "imageURL": true, "IMAGEURL": true, "callbackUri": true, "URLs": true,
		"urlPath": true, "base_urls": true, "uri": true, "href": true, "web-URI": true, "curl": true,
		"security": false, "during": false, "curious": false, "model": false, "": false, "u_r_l": false,
		"Security_Level": false, "furled": false,
	} {
		if got := urlish([]byte(key)); got != want {
			t.Errorf("urlish(%q) = %v; want %v", key, got, want)
		}
	}
}

func TestContentEncoding(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		pass bool
	}{
		{nil, true},
		{[]string{"identity"}, true},
		{[]string{"gzip"}, false},
		{[]string{"identity, gzip"}, false},
		{[]string{"", "Deflate"}, false},
		{[]string{"br"}, false},
	} {
		if got := ContentEncoding(tc.in) == ""; got != tc.pass {
			t.Errorf("ContentEncoding(%q) passes = %v; want %v", tc.in, got, tc.pass)
		}
	}
}

// TestBodyBounded: the check holds a fixed amount however deep or long the body; an error
// is final.
func TestBodyBounded(t *testing.T) {
	c := NewBodyCheck(Generic.Reach())
	c.Write([]byte(strings.Repeat("[", MaxDepth)))
	if c.Err() != nil {
		t.Fatalf("%d deep refused: %v", MaxDepth, c.Err())
	}
	if _, err := c.Write([]byte("[")); err == nil {
		t.Fatal("one deeper passed")
	}
	if cap(c.stack) > 2*MaxDepth {
		t.Errorf("stack of %d", cap(c.stack))
	}
	if _, err := c.Write([]byte("]")); err == nil || c.Close() == nil {
		t.Error("a refused body passed later")
	}
}

// camel finds where a lower-case letter or digit meets an upper-case one; urlWord is a word
// that begins or ends with url or uri.
var (
	camel   = regexp.MustCompile(`([a-z0-9])([A-Z])`)
	urlWord = regexp.MustCompile(`^ur[il]|ur[il]s?$`)
)

// oracle judges a decoded body the slow, obvious way: every string the rules watch, by
// walking the tree. (It sees one of each duplicate key only; the checker sees them all.)
func oracle(r Reach, v any, key string, fetch bool) string {
	isName := func(k string) bool {
		for _, f := range fieldReach {
			if r&f.r != 0 && strings.EqualFold(k, f.name) {
				return true
			}
		}
		if r&ReachAnyURL != 0 {
			for _, w := range strings.FieldsFunc(camel.ReplaceAllString(k, "$1 $2"), func(r rune) bool {
				return !(r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r)))
			}) {
				w = strings.ToLower(w)
				if w == "href" || urlWord.MatchString(w) {
					return true
				}
			}
		}
		return false
	}
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if why := oracle(r, x, k, fetch || isName(key)); why != "" {
				return why
			}
		}
	case []any:
		for _, x := range v {
			if why := oracle(r, x, key, fetch); why != "" {
				return why
			}
		}
	case string:
		if isName(key) || (fetch && strings.EqualFold(key, "url")) {
			h, _, comma := strings.Cut(strings.TrimPrefix(v, "data:"), ",")
			if !strings.HasPrefix(v, "data:") || !comma || strings.ContainsFunc(h, func(r rune) bool {
				return !(r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$&^_.+-/;=", r)))
			}) {
				return key + " is not inline"
			}
		}
		if strings.EqualFold(key, "type") {
			t := strings.ToLower(v)
			if r&ReachMCP != 0 && t == "mcp" || r&ReachHostTools != 0 && hostTool([]byte(t)) {
				return "tool " + t
			}
		}
	}
	return ""
}

// FuzzBodyCheck: the check never panics; its verdict does not depend on how the body is cut
// into writes; a body it passes is one JSON value (or nothing) in which the slow oracle
// finds no field the server would fetch.
func FuzzBodyCheck(f *testing.F) {
	for _, tc := range modeltest.BodyCases() {
		if len(tc.Body) < 4096 {
			f.Add([]byte(tc.Body), uint8(0), uint16(1))
		}
	}
	f.Add([]byte(`{"image_url":{"url":"data:image/png;base64,AAAA"}}`), uint8(5), uint16(3))
	f.Add([]byte(`{"tools":[{"type":"web_search_preview"}]}`), uint8(4), uint16(7))
	f.Fuzz(func(t *testing.T, body []byte, kind uint8, split uint16) {
		k := Kind(kind % uint8(numKinds))
		r := k.Reach()
		whole := checkBody(r, body, nil)
		cut := checkBody(r, body, []int{int(split%64) + 1, int(split>>6) + 1})
		if (whole == nil) != (cut == nil) {
			t.Fatalf("whole: %v; cut by %d: %v", whole, split, cut)
		}
		if whole != nil {
			return
		}
		if strings.TrimSpace(string(body)) == "" {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("passed what is not JSON: %q", body)
		}
		var v any
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber() // a number too large for a float64 is still JSON
		if err := d.Decode(&v); err != nil {
			t.Fatalf("passed what does not decode: %v", err)
		}
		if why := oracle(r, v, "", false); why != "" {
			t.Fatalf("%v passed %q: %s", k, body, why)
		}
	})
}

// BenchmarkBodyCheck: a chat with a 1 MB inline image and one with many small parts.
func BenchmarkBodyCheck(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"image 1MB", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("QUJD", 1<<18) + `"}}]}]}`},
		{"chat 1MB", `{"model":"m","messages":[` + strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"hello, how are you today? \u00e9"},`, 1<<14), ",") + `]}`},
		{"small", `{"model":"bench","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := []byte(bc.body)
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				c := NewBodyCheck(OpenAI.Reach())
				for i := 0; i < len(body); i += 32 << 10 {
					c.Write(body[i:min(len(body), i+32<<10)])
				}
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func ExampleBodyCheck() {
	c := NewBodyCheck(OpenAI.Reach())
	c.Write([]byte(`{"messages":[{"role":"user","content":[{"type":"image_url",`))
	_, err := c.Write([]byte(`"image_url":{"url":"http://203.0.113.66/x"}}]}]}`))
	fmt.Println(err)
	// Output: the field messages[0].content[0].image_url.url holds what the model server would fetch as a URL; only inline data (a data: URL) passes here
}

// goRequest is a chat or responses request as a Go server (Ollama's OpenAI layer, LM Studio)
// decodes it with encoding/json: keys matched without case, the last duplicate kept.
type goRequest struct {
	Messages []struct {
		Content []goPart `json:"content"`
	} `json:"messages"`
	Input []struct {
		Content []goPart `json:"content"`
	} `json:"input"`
	Tools []struct {
		Type      string `json:"type"`
		ServerURL string `json:"server_url"`
	} `json:"tools"`
}

type goPart struct {
	Type     string          `json:"type"`
	ImageURL json.RawMessage `json:"image_url"` // {"url": ...} or a string
	AudioURL json.RawMessage `json:"audio_url"`
	VideoURL json.RawMessage `json:"video_url"`
	FileURL  string          `json:"file_url"`
}

// urlOf returns the URL a part's field holds, as a server reads either form.
func urlOf(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" { // (null decodes as "")
		return s, true
	}
	var o struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(raw, &o) == nil && o.URL != "" {
		return o.URL, true
	}
	return "", false
}

// FuzzBodyGoServer: what a Go server decodes from a body the generic and openai kinds
// pass holds no URL to fetch, only data: URLs, and names no MCP or host-side tool: a
// differential test of the checker's key matching and unescaping against encoding/json's.
func FuzzBodyGoServer(f *testing.F) {
	for _, tc := range modeltest.BodyCases() {
		if len(tc.Body) < 4096 {
			f.Add([]byte(tc.Body))
		}
	}
	f.Add([]byte(`{"messages":[{"content":[{"type":"image_url","Image_Url":{"Url":"http://x/"}}]}]}`))
	f.Add([]byte(`{"input":[{"content":[{"type":"input_image","image_url":"data:image/png;base64,AA"}]}],"tools":[{"type":"function"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, k := range []Kind{OpenAI, Generic} {
			if checkBody(k.Reach(), body, nil) != nil {
				continue
			}
			var req goRequest
			if json.Unmarshal(body, &req) != nil {
				continue
			}
			var parts []goPart
			for _, m := range req.Messages {
				parts = append(parts, m.Content...)
			}
			for _, m := range req.Input {
				parts = append(parts, m.Content...)
			}
			for _, p := range parts {
				for _, raw := range []json.RawMessage{p.ImageURL, p.AudioURL, p.VideoURL} {
					if u, ok := urlOf(raw); ok && !strings.HasPrefix(u, "data:") {
						t.Fatalf("%v passed %q: a Go server reads the URL %q", k, body, u)
					}
				}
				if p.FileURL != "" && !strings.HasPrefix(p.FileURL, "data:") {
					t.Fatalf("%v passed %q: a Go server reads the file URL %q", k, body, p.FileURL)
				}
			}
			for _, tl := range req.Tools {
				if strings.EqualFold(tl.Type, "mcp") || tl.ServerURL != "" && !strings.HasPrefix(tl.ServerURL, "data:") {
					t.Fatalf("%v passed %q: a Go server reads the tool %+v", k, body, tl)
				}
			}
		}
	})
}
