package modelapi

import (
	"bytes"
	"strings"
)

// Framing judges a request head as it came on the wire (the request line, the header
// lines and the blank line that ends them) for what would let two HTTP implementations
// disagree on where the body ends or what a header says (RFC 9112 sections 5.2, 6.1, 6.3
// and 11.2). It returns "" when the head is unambiguous, else the reason to refuse it:
//
//   - both Content-Length and Transfer-Encoding (section 6.3 lets a recipient pick one;
//     we do not guess which the server picks);
//   - two Content-Length fields, or one holding a list, even of equal values;
//   - a Transfer-Encoding other than one "chunked";
//   - obsolete line folding (a header line starting with a space or a tab);
//   - a bare CR inside a line.
//
// It does not parse the request (net/http does, after it): it only looks at the lines'
// first bytes and the two framing fields' names and values.
func Framing(head []byte) string {
	var lengths, codings int
	var coding string
	for i, line := range bytes.Split(head, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if bytes.IndexByte(line, '\r') >= 0 {
			return "a bare CR in the request head"
		}
		if i == 0 || len(line) == 0 {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			return "obsolete line folding in the request head"
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue // net/http refuses it
		}
		switch {
		case strings.EqualFold(string(name), "Content-Length"):
			lengths++
			if bytes.IndexByte(value, ',') >= 0 {
				return "a list of body lengths"
			}
		case strings.EqualFold(string(name), "Transfer-Encoding"):
			codings++
			coding = strings.TrimSpace(string(value))
		}
	}
	switch {
	case lengths > 0 && codings > 0:
		return "both Content-Length and Transfer-Encoding: the body length is ambiguous"
	case lengths > 1:
		return "two Content-Length fields: the body length is ambiguous"
	case codings > 1 || codings == 1 && !strings.EqualFold(coding, "chunked"):
		return "a transfer coding other than chunked"
	}
	return ""
}

// HeadEnd returns the length of the request head at the start of b (through the blank
// line that ends it, which may be "\r\n" or "\n" as net/http accepts), or -1 when b holds
// no complete head.
func HeadEnd(b []byte) int {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		line := b[i : i+j]
		i += j + 1
		if len(line) == 0 || len(line) == 1 && line[0] == '\r' {
			return i
		}
	}
	return -1
}
