package sniff

import "bytes"

// Kind is what a client's first bytes are, as far as the router tells a refused flow why:
// a plaintext HTTP/1 request can be answered (a 403 that says why), anything else only reset.
type Kind uint8

const (
	KindMore  Kind = iota // too few bytes to tell: a prefix of an HTTP/1 request line, or none
	KindHTTP              // an HTTP/1 request: a method this package knows, and " HTTP/1." in its line
	KindTLS               // a TLS record (its first byte is a handshake record's type)
	KindOther             // anything else: another protocol, HTTP/2, HTTP/0.9, or a request line over Max
)

// String names k for logs and tests.
func (k Kind) String() string {
	switch k {
	case KindMore:
		return "more"
	case KindHTTP:
		return "http"
	case KindTLS:
		return "tls"
	}
	return "other"
}

// KindOf tells what b, a client's first bytes, are (see Kind). It looks at no more than Max
// bytes, allocates nothing and never modifies b. A request line is judged once whole (up to
// its line feed): KindMore until then, so a caller reads more (up to Max) and asks again.
func KindOf(b []byte) Kind {
	if len(b) > Max {
		b = b[:Max]
	}
	if len(b) == 0 {
		return KindMore
	}
	if b[0] == recordHandshake {
		return KindTLS
	}
	method := false
	for _, m := range methods {
		n := min(len(b), len(m))
		if string(b[:n]) != m[:n] {
			continue
		}
		if n < len(m) {
			return KindMore // a prefix of a method
		}
		method = true
		break
	}
	if !method {
		return KindOther
	}
	line := bytes.IndexByte(b, '\n')
	switch {
	case line < 0 && len(b) < Max:
		return KindMore
	case line < 0:
		return KindOther
	case bytes.Contains(b[:line], []byte(" HTTP/1.")):
		return KindHTTP
	}
	return KindOther
}
