// Package modelapi decides which HTTP requests a model forward passes to the model server:
// the inference calls of the server kinds it fronts, nothing else. It is pure (no I/O, the
// standard library only) so that the forward, `router explain`-style tools and the tests
// all ask the same function.
//
// The model servers our users run expose management calls next to inference: Ollama's
// pull, push, create (with a remote host) and delete make the host itself fetch from, or
// upload to, wherever the caller names, past the proxy. A forward therefore passes a request
// only when its method and its path, as the server will route it, are on the allow-list of
// one of the forward's kinds (see [Lists]), plus the forward's own allow_paths.
//
// The path is judged after the normalization a server might apply: percent-decoding, dot
// segments, doubled and trailing slashes, letter case. A request the forward passes goes to
// the server with that normalized path (the allow-list's own spelling), so the server routes
// exactly what was checked, whatever its own rules. What cannot be normalized unambiguously
// (an encoded percent sign, a backslash, a dot segment above the root, a control byte) is
// refused, never guessed at; so is a request head whose body length could be read two ways
// (see [Framing]).
//
// An inference call can still make the server connect out by what its body names: an image
// URL it downloads, an MCP server it calls. Each body a forward passes is therefore read as
// it streams by a [BodyCheck], which refuses the fields the forward's kinds resolve as URLs
// (see [Kind.Reach]) unless they hold inline data; see body.go.
package modelapi

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Kind is a model server's API family.
type Kind uint8

const (
	OpenAI   Kind = iota // the OpenAI-compatible /v1 calls (llama.cpp, vLLM, LM Studio, Ollama, ...)
	Ollama               // Ollama's own /api calls and its OpenAI-compatible ones
	LMStudio             // LM Studio's /api/v0 REST calls and its OpenAI-compatible ones
	TCP                  // no HTTP at all: a raw TCP pipe that passes everything
	LlamaCpp             // llama.cpp's server: its own inference calls and its OpenAI-compatible ones
	VLLM                 // vLLM's server: its own inference calls and its OpenAI-compatible ones
	Generic              // any OpenAI-compatible server, judged most strictly (see [Kind.Reach])
	numKinds
)

var kindNames = [numKinds]string{OpenAI: "openai", Ollama: "ollama", LMStudio: "lmstudio", TCP: "tcp",
	LlamaCpp: "llamacpp", VLLM: "vllm", Generic: "generic"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "unknown"
}

// ParseKind returns the kind named s ("openai", "ollama", "lmstudio", "tcp", "llamacpp",
// "vllm", "generic").
func ParseKind(s string) (Kind, bool) {
	i := slices.Index(kindNames[:], s)
	return Kind(i), i >= 0
}

// KindNames lists the kinds' names, in order.
func KindNames() []string { return slices.Clone(kindNames[:]) }

// Default is the kinds of a forward that names none: the OpenAI-compatible and the Ollama
// inference calls. A raw pipe (TCP) is never a default.
func Default() []Kind { return []Kind{OpenAI, Ollama} }

// Route is one allowed call: a method and a path. A Path ending in "/*" matches the path
// before it followed by one or more segments (a model id, for instance), never the bare
// prefix. A GET route also allows HEAD.
type Route struct {
	Method string
	Path   string
}

func (r Route) String() string { return r.Method + " " + r.Path }

// openAI is the OpenAI-compatible inference surface, as Ollama (server/routes.go), LM Studio
// (docs: "OpenAI Compatible Endpoints"), llama.cpp's server and vLLM serve it.
var openAI = []Route{
	{"GET", "/v1/models"},
	{"GET", "/v1/models/*"},
	{"POST", "/v1/chat/completions"},
	{"POST", "/v1/completions"},
	{"POST", "/v1/embeddings"},
	{"POST", "/v1/responses"},
}

// ollama is Ollama's own inference and read-only calls (server/routes.go). Left out on
// purpose: pull, push, create, copy, delete, blobs (they change the host's models or make it
// fetch or upload), the account calls (me, signout, user keys), the experimental web
// search and fetch (the host fetches a URL), status.
var ollama = []Route{
	{"GET", "/"},
	{"GET", "/api/version"},
	{"GET", "/api/tags"},
	{"GET", "/api/ps"},
	{"POST", "/api/show"},
	{"POST", "/api/chat"},
	{"POST", "/api/generate"},
	{"POST", "/api/embed"},
	{"POST", "/api/embeddings"},
}

// lmStudio is LM Studio's REST API v0 (docs: "REST API v0") and the model list of its v1
// REST API. Left out: the v1 load, unload and download calls (download fetches from the
// internet), and /api/v1/chat, which can be told to call remote MCP servers from the host.
var lmStudio = []Route{
	{"GET", "/api/v0/models"},
	{"GET", "/api/v0/models/*"},
	{"POST", "/api/v0/chat/completions"},
	{"POST", "/api/v0/completions"},
	{"POST", "/api/v0/embeddings"},
	{"GET", "/api/v1/models"},
}

// llamaCpp is llama.cpp's server's own inference and read-only calls (tools/server,
// README "API Endpoints"). Left out: POST /props (changes the server's settings), /slots
// (saves and restores the KV cache to files on the host), POST /lora-adapters, /metrics,
// and the Anthropic-compatible /v1/messages (its image "source" may name a URL).
var llamaCpp = []Route{
	{"GET", "/health"},
	{"GET", "/props"},
	{"POST", "/completion"},
	{"POST", "/completions"},
	{"POST", "/infill"},
	{"POST", "/embedding"},
	{"POST", "/embeddings"},
	{"POST", "/rerank"},
	{"POST", "/reranking"},
	{"POST", "/v1/rerank"},
	{"POST", "/tokenize"},
	{"POST", "/detokenize"},
	{"POST", "/apply-template"},
}

// vLLM is vLLM's OpenAI-compatible server's own inference and read-only calls
// (vllm/entrypoints/openai/api_server.py). Left out: the audio calls (multipart bodies),
// /v1/load_lora_adapter and /v1/unload_lora_adapter (they load from a path or a hub),
// sleep, wake_up, reset_prefix_cache, /metrics and the other operator calls.
var vLLM = []Route{
	{"GET", "/health"},
	{"GET", "/version"},
	{"POST", "/tokenize"},
	{"POST", "/detokenize"},
	{"POST", "/pooling"},
	{"POST", "/classify"},
	{"POST", "/score"},
	{"POST", "/v1/score"},
	{"POST", "/rerank"},
	{"POST", "/v1/rerank"},
	{"POST", "/v2/rerank"},
}

// Lists returns kind k's allow-list (nil for TCP, which has none: it passes everything).
// Every kind but TCP includes the OpenAI-compatible calls, which all those servers serve;
// Generic is those alone.
func Lists(k Kind) []Route {
	switch k {
	case OpenAI, Generic:
		return slices.Clone(openAI)
	case LlamaCpp:
		return slices.Concat(llamaCpp, openAI)
	case VLLM:
		return slices.Concat(vLLM, openAI)
	case Ollama:
		return slices.Concat(ollama, openAI)
	case LMStudio:
		return slices.Concat(lmStudio, openAI)
	}
	return nil
}

// Policy is a compiled allow-list. The zero Policy refuses everything; it is immutable and
// safe for concurrent use.
type Policy struct {
	exact  map[string]Route // key: method + " " + lower-case path
	prefix []Route          // routes ending in "/*", Path without the "*"
	reach  Reach            // what the bodies may not hold: the union of the kinds'
}

// ParseRoute parses an allow_paths entry: "METHOD /path" or "/path" (GET, HEAD and POST).
// The path must already be normalized ("/v1/rerank", not "/v1//rerank/") and may end in
// "/*".
func ParseRoute(s string) ([]Route, error) {
	method, path, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok {
		method, path = "", method
	}
	path = strings.TrimSpace(path)
	methods := []string{"GET", "POST"}
	if method != "" {
		if !slices.Contains([]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}, method) {
			return nil, fmt.Errorf("%q: the method must be one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS (upper case)", s)
		}
		methods = []string{method}
	}
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("%q: the path must start with /", s)
	}
	base := strings.TrimSuffix(path, "/*")
	if base == "" {
		base = "/"
	}
	if c, err := Normalize(base); err != nil || c != base {
		if err == nil {
			err = fmt.Errorf("write it as %q", c)
		}
		return nil, fmt.Errorf("%q: the path is not in normal form: %w", s, err)
	}
	out := make([]Route, 0, len(methods))
	for _, m := range methods {
		out = append(out, Route{Method: m, Path: path})
	}
	return out, nil
}

// New compiles the allow-lists of kinds plus extra routes (allow_paths). A list that holds
// TCP is an error: a raw pipe has no list; check [Raw] first.
func New(kinds []Kind, extra []Route) (*Policy, error) {
	p := &Policy{exact: map[string]Route{}}
	var all []Route
	for _, k := range kinds {
		if k == TCP {
			return nil, errors.New(`"tcp" is a raw pipe and has no allow-list; it cannot be combined`)
		}
		all = append(all, Lists(k)...)
		p.reach |= k.Reach()
	}
	for _, r := range append(all, extra...) {
		if base, ok := strings.CutSuffix(r.Path, "/*"); ok {
			r.Path = base + "/"
			if !slices.Contains(p.prefix, r) {
				p.prefix = append(p.prefix, r)
			}
			continue
		}
		p.exact[r.Method+" "+strings.ToLower(r.Path)] = r
	}
	return p, nil
}

// Body returns a check for one request body, against what the policy's kinds resolve as
// URLs (see [BodyCheck]). Every body a forward passes is checked, allow_paths' included:
// a body must be JSON, whatever its Content-Type says.
func (p *Policy) Body() *BodyCheck {
	if p == nil {
		return NewBodyCheck(Generic.Reach())
	}
	return NewBodyCheck(p.reach)
}

// Reach returns what the policy's bodies may not hold.
func (p *Policy) Reach() Reach {
	if p == nil {
		return Generic.Reach()
	}
	return p.reach
}

// Raw reports whether kinds ask for a raw TCP pipe.
func Raw(kinds []Kind) bool { return slices.Contains(kinds, TCP) }

// Verdict is the answer for one request.
type Verdict struct {
	// Path is the normalized path to send to the server (the allow-list's spelling), when
	// the request passes.
	Path string
	// Reason is empty when the request passes, else a short sentence saying why not, fit
	// for the refusal's body and the log (it never quotes the request's bytes beyond its
	// method and normalized path).
	Reason string
}

// OK reports whether the request passes.
func (v Verdict) OK() bool { return v.Reason == "" }

// Check judges one request by its method and its request target as sent (the raw
// request-URI: origin-form "/path?query" or absolute-form "http://host/path"). self is the
// authority the forward is reached at (the address the guest connected to): an
// absolute-form target must name it, over http, or it is refused.
func (p *Policy) Check(method, target, self string) Verdict {
	if p == nil {
		return Verdict{Reason: "no call is allowed"}
	}
	rawPath, ok := pathOf(target, self)
	if !ok {
		return Verdict{Reason: "the request target is not a path on this server (absolute-form naming another host, authority-form or *)"}
	}
	path, err := Normalize(rawPath)
	if err != nil {
		return Verdict{Reason: "the path is ambiguous: " + err.Error()}
	}
	if r, ok := p.match(method, path); ok {
		return Verdict{Path: r}
	}
	return Verdict{Reason: fmt.Sprintf("%s %s is not an inference call of this forward's model API", method, path)}
}

// match returns the path to send for method and the normalized path, when allowed.
func (p *Policy) match(method, path string) (string, bool) {
	lower := strings.ToLower(path)
	methods := []string{method}
	if method == "HEAD" {
		methods = append(methods, "GET")
	}
	for _, m := range methods {
		if r, ok := p.exact[m+" "+lower]; ok {
			return r.Path, true
		}
		for _, r := range p.prefix {
			if r.Method == m && len(lower) > len(r.Path) && strings.HasPrefix(lower, strings.ToLower(r.Path)) {
				return r.Path + path[len(r.Path):], true
			}
		}
	}
	return "", false
}

// pathOf returns the path part of a request target: origin-form as is, absolute-form only
// when it names self over http.
func pathOf(target, self string) (string, bool) {
	if strings.HasPrefix(target, "/") {
		p, _, _ := strings.Cut(target, "?")
		return p, !strings.Contains(p, "#")
	}
	u, err := url.ParseRequestURI(target)
	if err != nil || !strings.EqualFold(u.Scheme, "http") || u.Opaque != "" || u.User != nil ||
		u.Host == "" || !strings.EqualFold(u.Host, self) {
		return "", false
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	return p, true
}

// Normalize returns the path a server routes raw to, whatever its normalization: decoded
// once, dot segments resolved, empty segments (doubled or trailing slashes) dropped. It
// refuses what a server could read two ways: a percent sign left after decoding (encoded
// twice), a backslash, a semicolon (path parameters), a control or non-ASCII byte, a dot
// segment that climbs above the root, a path that does not start with a slash.
func Normalize(raw string) (string, error) {
	if !strings.HasPrefix(raw, "/") {
		return "", errors.New("it does not start with /")
	}
	dec, err := url.PathUnescape(raw)
	if err != nil {
		return "", errors.New("bad percent-encoding")
	}
	for i := 0; i < len(dec); i++ {
		switch c := dec[i]; {
		case c == '%':
			return "", errors.New("a percent sign encoded twice")
		case c == '\\':
			return "", errors.New("a backslash")
		case c == ';':
			return "", errors.New("a semicolon")
		case c < 0x20 || c >= 0x7f:
			return "", errors.New("a control or non-ASCII byte")
		}
	}
	segs := make([]string, 0, 8)
	for s := range strings.SplitSeq(dec, "/") {
		switch s {
		case "", ".":
		case "..":
			if len(segs) == 0 {
				return "", errors.New("a dot segment above the root")
			}
			segs = segs[:len(segs)-1]
		default:
			segs = append(segs, s)
		}
	}
	return "/" + strings.Join(segs, "/"), nil
}
