package httpconnect

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"strings"
)

// minHeadLen is the length of the shortest head the parser accepts,
// "HTTP/1.1 200\r\n\r\n": the first read asks for no more, so that it never
// reads past the end of a head.
const minHeadLen = len("HTTP/1.1 200\r\n\r\n")

// maxZeroReads is how many reads in a row may return nothing before
// ReadResponse gives up with io.ErrNoProgress (as bufio does).
const maxZeroReads = 100

var crlfcrlf = []byte("\r\n\r\n")

// ReadResponse reads the head of a proxy's answer to CONNECT from r and
// parses it with [ParseResponse]. It reads byte-exactly: never past the
// empty line that ends the head, so what follows (the target's first bytes,
// or the body of a refusal) is still unread in r. No read asks for more than
// 4 bytes past the shortest possible head; r needs no buffering, and
// ReadResponse keeps none.
//
// It gives up with an error when the first bytes are not "HTTP/", when the
// head grows past [MaxResponseLen] bytes without ending, when r ends before
// the head does (wrapping io.EOF when nothing was read, io.ErrUnexpectedEOF
// otherwise), or when r fails (wrapping its error). ReadResponse sets no
// deadline: the caller bounds the wait on r. The status is not judged here:
// a well-formed head is returned with a nil error whatever its code.
func ReadResponse(r io.Reader) (Response, error) {
	buf := make([]byte, 0, 256)
	zero := 0
	for {
		want := 4 - partialEnd(buf)
		if len(buf) < minHeadLen {
			want = minHeadLen - len(buf)
		}
		if len(buf)+want > MaxResponseLen {
			want = MaxResponseLen - len(buf)
		}
		if want == 0 {
			return Response{}, fmt.Errorf("read response: head longer than %d bytes", MaxResponseLen)
		}
		buf = grow(buf, want)
		n, err := r.Read(buf[len(buf) : len(buf)+want])
		buf = buf[:len(buf)+n]
		if len(buf) >= 5 && !bytes.HasPrefix(buf, []byte("HTTP/")) ||
			len(buf) < 5 && !bytes.HasPrefix([]byte("HTTP/"), buf) {
			return Response{}, fmt.Errorf("read response: %q is not the start of an HTTP response", buf[:min(len(buf), 5)])
		}
		if bytes.HasSuffix(buf, crlfcrlf) {
			return ParseResponse(buf)
		}
		switch {
		case err == io.EOF && len(buf) == 0:
			return Response{}, fmt.Errorf("read response: %w", io.EOF)
		case err == io.EOF:
			return Response{}, fmt.Errorf("read response: %w after %d bytes", io.ErrUnexpectedEOF, len(buf))
		case err != nil:
			return Response{}, fmt.Errorf("read response: %w", err)
		case n == 0:
			if zero++; zero >= maxZeroReads {
				return Response{}, fmt.Errorf("read response: %w", io.ErrNoProgress)
			}
		default:
			zero = 0
		}
	}
}

// partialEnd returns how many bytes at the end of b are a beginning of
// CRLF CRLF that is not complete: 0 to 3.
func partialEnd(b []byte) int {
	for k := 3; k > 0; k-- {
		if bytes.HasSuffix(b, crlfcrlf[:k]) {
			return k
		}
	}
	return 0
}

// grow returns b with room for n more bytes.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), max(2*cap(b), len(b)+n))
	copy(nb, b)
	return nb
}

// ParseResponse parses a whole response head: the status line, the header
// lines and the empty line, and nothing after it (head ends with its first
// CRLF CRLF). See the package documentation for what is refused; each error
// says which line failed and why. The status is not judged: any well-formed
// code from 100 to 599 is returned with a nil error. Response keeps no
// reference to head.
func ParseResponse(head []byte) (Response, error) {
	if len(head) > MaxResponseLen {
		return Response{}, fmt.Errorf("response: head of %d bytes, longer than %d", len(head), MaxResponseLen)
	}
	end := bytes.Index(head, crlfcrlf)
	if end < 0 || end+len(crlfcrlf) != len(head) {
		return Response{}, errors.New("response: head does not end at its first empty line")
	}
	var resp Response
	lines := head[:end+2] // every line with its CRLF
	for n := 0; len(lines) > 0; n++ {
		i := bytes.Index(lines, []byte("\r\n"))
		line := lines[:i]
		lines = lines[i+2:]
		if j := bytes.IndexAny(line, "\r\n"); j >= 0 {
			return Response{}, fmt.Errorf("response: line %d has a bare %q (lines end in CRLF)", n+1, line[j])
		}
		if n == 0 {
			if err := parseStatus(line, &resp); err != nil {
				return Response{}, fmt.Errorf("response: status line: %w", err)
			}
			continue
		}
		if n > MaxHeaderLines {
			return Response{}, fmt.Errorf("response: more than %d header lines", MaxHeaderLines)
		}
		name, value, err := parseField(line)
		if err != nil {
			return Response{}, fmt.Errorf("response: line %d: %w", n+1, err)
		}
		if resp.Header == nil {
			resp.Header = textproto.MIMEHeader{}
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		resp.Header[key] = append(resp.Header[key], value)
	}
	return resp, nil
}

// parseStatus parses "HTTP/1.x SP 3DIGIT [SP reason]" (RFC 9112 §4; the
// reason and the space before it may be missing).
func parseStatus(line []byte, resp *Response) error {
	const verLen = len("HTTP/1.1")
	if len(line) < verLen+4 {
		return fmt.Errorf("%q is too short", line)
	}
	ver := line[:verLen]
	if !bytes.HasPrefix(ver, []byte("HTTP/")) || !isDigit(ver[5]) || ver[6] != '.' || !isDigit(ver[7]) {
		return fmt.Errorf("version %q is not HTTP/digit.digit", ver)
	}
	if ver[5] != '1' {
		return fmt.Errorf("version %q, want HTTP/1.x", ver)
	}
	if line[verLen] != ' ' {
		return errors.New("no space after the version")
	}
	code := line[verLen+1 : verLen+4]
	if !isDigit(code[0]) || !isDigit(code[1]) || !isDigit(code[2]) || code[0] < '1' || code[0] > '5' {
		return fmt.Errorf("status %q is not a code from 100 to 599", code)
	}
	rest := line[verLen+4:]
	if len(rest) > 0 && rest[0] != ' ' {
		return fmt.Errorf("no space after the status %q", code)
	}
	if len(rest) > 0 {
		rest = rest[1:]
	}
	if i := indexCTL(rest); i >= 0 {
		return fmt.Errorf("reason has control byte 0x%02x", rest[i])
	}
	resp.Proto = string(ver)
	resp.StatusCode = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	resp.Reason = string(rest)
	return nil
}

// parseField parses "name: value" (RFC 9112 §5, RFC 9110 §5.5).
func parseField(line []byte) (name, value string, err error) {
	if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
		return "", "", errors.New("obsolete line folding (a line starting with whitespace)")
	}
	colon := bytes.IndexByte(line, ':')
	if colon < 0 {
		return "", "", errors.New("header line has no colon")
	}
	n := line[:colon]
	if len(n) == 0 {
		return "", "", errors.New("empty field name")
	}
	for _, c := range n {
		if !isTchar(c) {
			return "", "", fmt.Errorf("field name %q has byte 0x%02x, which a token cannot have", n, c)
		}
	}
	v := bytes.Trim(line[colon+1:], " \t")
	if i := indexCTL(v); i >= 0 {
		return "", "", fmt.Errorf("field %q has control byte 0x%02x in its value", n, v[i])
	}
	return string(n), string(v), nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isTchar reports whether c may appear in a token (RFC 9110 §5.6.2).
func isTchar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// indexCTL returns the index of the first control byte in b other than
// HTAB, or -1. Bytes 0x80 and above (obs-text) are allowed.
func indexCTL(b []byte) int {
	for i, c := range b {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return i
		}
	}
	return -1
}
