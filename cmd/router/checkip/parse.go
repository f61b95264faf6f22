package checkip

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ParseEcho extracts the client address from an IP-echo answer. It accepts:
//   - plain text: the address alone, surrounding whitespace and newlines ignored;
//   - key=value lines with an "ip" key (Cloudflare's /cdn-cgi/trace);
//   - a JSON object with the address under a common key: "ip", "origin" (httpbin; the first of
//     a comma-separated chain), "address", "ip_addr", "query" (ip-api), "client_ip",
//     "your_ip", "remote_addr" (a port is dropped) and spellings alike; keys compare without
//     case, "_" or "-", and one level of nesting ({"address": {"ip": ...}}) is looked into.
//
// The address has no zone, is neither unspecified nor multicast, and an IPv4-mapped IPv6
// address comes back as IPv4. Anything else is an error. ParseEcho does not bound its input;
// callers read at most MaxEchoBody bytes.
func ParseEcho(body []byte) (netip.Addr, error) {
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	s := strings.TrimSpace(string(body))
	if s == "" {
		return netip.Addr{}, errors.New("empty echo answer")
	}
	if s[0] == '{' {
		return parseEchoJSON([]byte(s))
	}
	if a, err := parseEchoAddr(s); err == nil {
		return a, nil
	}
	// key=value lines, as Cloudflare's trace page answers.
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "ip") {
			a, err := parseEchoAddr(strings.TrimSpace(v))
			if err != nil {
				return netip.Addr{}, fmt.Errorf("ip= line: %w", err)
			}
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("echo answer is not an address: %s", snippet(s))
}

func normKey(k string) string {
	k = strings.ToLower(k)
	return strings.NewReplacer("_", "", "-", "").Replace(k)
}

func parseEchoJSON(b []byte) (netip.Addr, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return netip.Addr{}, fmt.Errorf("decode echo json: %w", err)
	}
	a, ok, err := addrFromObject(obj, 1)
	if err != nil {
		return netip.Addr{}, err
	}
	if !ok {
		return netip.Addr{}, errors.New("echo json has no address field")
	}
	return a, nil
}

// addrFromObject looks for an address under the known keys in obj, descending depth more levels into
// nested objects. ok is false when no key is present; err is set when one is present but
// holds no address.
func addrFromObject(obj map[string]json.RawMessage, depth int) (a netip.Addr, ok bool, err error) {
	byNorm := make(map[string]string, len(obj)) // normalised key -> first raw key in sorted order
	raw := make([]string, 0, len(obj))
	for k := range obj {
		raw = append(raw, k)
	}
	slices.Sort(raw)
	for _, k := range raw {
		if _, dup := byNorm[normKey(k)]; !dup {
			byNorm[normKey(k)] = k
		}
	}
	// The keys that hold the client address, normalised by normKey, in the order looked for.
	keys := [...]string{
		"ip", "origin", "address", "ipaddr", "ipaddress", "query", "clientip", "clientaddress",
		"yourip", "youripaddress", "remoteaddr", "remoteaddress", "myip", "ipv4", "ipv6",
		"yourfuckingipaddress",
	}
	for _, key := range keys {
		k, present := byNorm[key]
		if !present {
			continue
		}
		v := bytes.TrimSpace(obj[k])
		switch {
		case len(v) > 0 && v[0] == '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return netip.Addr{}, true, fmt.Errorf("echo json %q: %w", k, err)
			}
			a, err := parseEchoValue(s)
			if err != nil {
				return netip.Addr{}, true, fmt.Errorf("echo json %q: %w", k, err)
			}
			return a, true, nil
		case len(v) > 0 && v[0] == '{' && depth > 0:
			var inner map[string]json.RawMessage
			if err := json.Unmarshal(v, &inner); err != nil {
				return netip.Addr{}, true, fmt.Errorf("echo json %q: %w", k, err)
			}
			if a, ok, err := addrFromObject(inner, depth-1); ok || err != nil {
				return a, ok, err
			}
		}
	}
	return netip.Addr{}, false, nil
}

// parseEchoValue reads a JSON string value: an address, an address with a port, or a
// comma-separated chain whose first element is the client (httpbin's "origin").
func parseEchoValue(s string) (netip.Addr, error) {
	first, _, _ := strings.Cut(s, ",")
	first = strings.TrimSpace(first)
	if ap, err := netip.ParseAddrPort(first); err == nil {
		return checkEchoAddr(ap.Addr())
	}
	return parseEchoAddr(first)
}

func parseEchoAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("not an address: %s", snippet(s))
	}
	return checkEchoAddr(a)
}

func checkEchoAddr(a netip.Addr) (netip.Addr, error) {
	switch {
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("address %s has a zone", snippet(a.String()))
	case a.IsUnspecified():
		return netip.Addr{}, fmt.Errorf("address %s is unspecified", a)
	case a.IsMulticast():
		return netip.Addr{}, fmt.Errorf("address %s is multicast", a)
	}
	return a.Unmap(), nil
}

// ParseModels extracts the model ids from a model-list answer: OpenAI's /v1/models
// ({"data":[{"id":...}]}, also served by Ollama, LM Studio, llama.cpp, vLLM), a bare array of
// such objects, or Ollama's /api/tags ({"models":[{"name":...,"model":...}]}). Empty ids are
// dropped and duplicates removed, order kept. A recognised list with no ids returns an empty
// slice and no error; an answer of neither shape is an error. ParseModels does not bound its
// input; callers read at most MaxModelBody bytes.
func ParseModels(body []byte) ([]string, error) {
	body = bytes.TrimSpace(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")))
	type openAIModel struct {
		ID string `json:"id"`
	}
	var ids []string
	switch {
	case len(body) > 0 && body[0] == '[':
		var list []openAIModel
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("decode model list: %w", err)
		}
		for _, m := range list {
			ids = append(ids, m.ID)
		}
	case len(body) > 0 && body[0] == '{':
		var v struct {
			Data   *[]openAIModel `json:"data"`
			Models *[]struct {
				Name  string `json:"name"`
				Model string `json:"model"`
			} `json:"models"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			return nil, fmt.Errorf("decode model list: %w", err)
		}
		switch {
		case v.Data != nil:
			for _, m := range *v.Data {
				ids = append(ids, m.ID)
			}
		case v.Models != nil:
			for _, m := range *v.Models {
				id := m.Name
				if id == "" {
					id = m.Model
				}
				ids = append(ids, id)
			}
		default:
			return nil, errors.New("model list has neither \"data\" nor \"models\"")
		}
	default:
		return nil, fmt.Errorf("model list is not json: %s", snippet(string(body)))
	}
	out := make([]string, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, id)
	}
	return out, nil
}

// ModelURL completes a model endpoint the way --model documents it. A value without a scheme
// gets "http://". Then, by the path (trailing slashes ignored):
//   - ending in "/models" or "/api/tags": used as is;
//   - ending in "/v1": "/models" is appended;
//   - anything else (none, "/", a base path): "/v1/models" is appended.
//
// So "10.0.2.2:47831", "http://10.0.2.2:47831/v1" and "http://10.0.2.2:47831/v1/models" all
// mean http://10.0.2.2:47831/v1/models.
func ModelURL(s string) (string, error) {
	u, err := parseHTTPURL(s)
	if err != nil {
		return "", fmt.Errorf("model url %q: %w", s, err)
	}
	p := strings.TrimRight(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/models"), strings.HasSuffix(p, "/api/tags"):
	case strings.HasSuffix(p, "/v1"):
		p += "/models"
	default:
		p += "/v1/models"
	}
	u.Path, u.RawPath = p, ""
	return u.String(), nil
}

// readBounded reads all of r, but fails without reading further once it holds more than max
// bytes.
func readBounded(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("body is larger than %d bytes", max)
	}
	return b, nil
}

// snippet quotes at most 40 bytes of untrusted text for an error message; control and invalid
// bytes come out escaped, so no server can write to the user's terminal.
func snippet(s string) string {
	const n = 40
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "…"
	}
	return strconv.Quote(s)
}

// clean makes untrusted text (a model id, an error that quotes a server) safe to print: every
// rune that is not printable becomes U+FFFD.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}
