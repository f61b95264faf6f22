// Package sniff reads the name a client's first bytes carry: the server name of a TLS
// ClientHello (SNI, RFC 6066 section 3) or the Host header of an HTTP/1 request (RFC 9112
// section 3.2). The router asks it before it dials a caged flow's upstream, so that a flow
// whose address no DNS answer of ours gave out still has a name for the rules, the proxy and
// the logs. It imports nothing of ours and never modifies its input.
//
// The bytes are untrusted: Sniff looks at no more than Max of them, allocates only the name
// it returns, and any ClientHello it cannot read whole (malformed, over Max, or an Encrypted
// Client Hello, whose outer name is the provider's, not the flow's) is unnamed. A caller
// decides what an unnamed flow gets; the router refuses it where the rules name hosts.
package sniff

import (
	"bytes"
	"net/netip"
)

// Max is the most bytes Sniff reads: a ClientHello with post-quantum key shares takes about
// 1.8 KiB, and a few of them, or a long Host request line, fit with room to spare. A prefix
// of Max bytes that is still incomplete is unnamed.
const Max = 16 << 10

// Origin is where a name came from.
type Origin uint8

const (
	None Origin = iota // no name: not TLS or HTTP/1, no server name, ECH, or unreadable
	SNI                // the server_name of a TLS ClientHello
	Host               // the Host header of an HTTP/1 request
)

// String is the origin as logs and status show it: "sni", "host", or "".
func (o Origin) String() string {
	switch o {
	case SNI:
		return "sni"
	case Host:
		return "host"
	}
	return ""
}

// Result is what Sniff found in a client's first bytes.
type Result struct {
	// Name is the name the bytes carry, lower case without a trailing dot; "" when none.
	Name string
	From Origin
	// More says the bytes are a prefix of something that may still carry a name: the caller
	// should read more (up to Max) and ask again. When false, the answer is final.
	More bool
	// ECH says the ClientHello offers an Encrypted Client Hello (extension 0xfe0d): its
	// outer name is not the flow's, so Name is "".
	ECH bool
}

// Sniff reads b, the first bytes a client sent (see Result).
func Sniff(b []byte) Result {
	if len(b) > Max {
		b = b[:Max]
	}
	var r Result
	switch {
	case len(b) == 0:
		r.More = true
	case b[0] == recordHandshake:
		r = clientHello(b)
	default:
		r = httpHost(b)
	}
	if r.More && len(b) >= Max {
		r.More = false // as much as anyone may read, and still incomplete: unnamed
	}
	return r
}

// TLS (RFC 8446 sections 5.1 and 4.1.2).
const (
	recordHandshake     = 0x16
	handshakeClientHi   = 0x01
	extServerName       = 0x0000
	extEncryptedHello   = 0xfe0d
	serverNameHost      = 0x00
	maxRecordLen        = 1<<14 + 2048 // a TLSCiphertext's bound; plaintext is 2^14, leave room
	recordHeaderLen     = 5
	handshakeHeaderLen  = 4
	maxNameLen          = 253
	maxClientHelloBytes = Max
)

// clientHello reads a ClientHello that may span several records: the handshake bytes are
// gathered from consecutive handshake records (at most Max of them) until the message is
// whole.
func clientHello(b []byte) Result {
	// The common case: the whole message in the first record, read in place.
	if len(b) >= recordHeaderLen+handshakeHeaderLen && b[1] == 3 && b[recordHeaderLen] == handshakeClientHi {
		l := int(b[3])<<8 | int(b[4])
		ml := int(b[6])<<16 | int(b[7])<<8 | int(b[8])
		if l <= maxRecordLen && handshakeHeaderLen+ml <= l && len(b) >= recordHeaderLen+handshakeHeaderLen+ml {
			return parseHello(b[recordHeaderLen+handshakeHeaderLen : recordHeaderLen+handshakeHeaderLen+ml])
		}
	}
	var msg [Max]byte // the handshake bytes, records stripped
	n := 0
	for len(b) > 0 {
		if len(b) < recordHeaderLen {
			return Result{More: true}
		}
		if b[0] != recordHandshake || b[1] != 3 {
			return Result{} // not a handshake record of TLS 1.x: no name
		}
		l := int(b[3])<<8 | int(b[4])
		if l == 0 || l > maxRecordLen {
			return Result{}
		}
		body := b[recordHeaderLen:]
		whole := len(body) >= l
		if whole {
			body = body[:l]
		}
		n += copy(msg[n:], body)
		if n >= handshakeHeaderLen {
			if msg[0] != handshakeClientHi {
				return Result{}
			}
			ml := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
			if handshakeHeaderLen+ml > maxClientHelloBytes {
				return Result{} // bigger than anyone reads: unnamed
			}
			if n >= handshakeHeaderLen+ml {
				return parseHello(msg[handshakeHeaderLen : handshakeHeaderLen+ml])
			}
		}
		if !whole {
			return Result{More: true}
		}
		b = b[recordHeaderLen+l:]
	}
	return Result{More: true}
}

// reader walks a byte string; a read past its end leaves it failed (ok false) and empty.
type reader struct {
	b  []byte
	ok bool
}

func (r *reader) take(n int) []byte {
	if !r.ok || n > len(r.b) || n < 0 {
		r.ok, r.b = false, nil
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() int {
	v := r.take(1)
	if v == nil {
		return 0
	}
	return int(v[0])
}

func (r *reader) u16() int {
	v := r.take(2)
	if v == nil {
		return 0
	}
	return int(v[0])<<8 | int(v[1])
}

// vec reads a vector with a length prefix of w bytes (1 or 2).
func (r *reader) vec(w int) reader {
	var l int
	if w == 1 {
		l = r.u8()
	} else {
		l = r.u16()
	}
	v := r.take(l)
	return reader{b: v, ok: r.ok}
}

// parseHello reads the body of a whole ClientHello (RFC 8446 section 4.1.2).
func parseHello(body []byte) Result {
	r := reader{b: body, ok: true}
	r.take(2 + 32) // legacy_version, random
	r.vec(1)       // legacy_session_id
	r.vec(2)       // cipher_suites
	r.vec(1)       // legacy_compression_methods
	if !r.ok {
		return Result{}
	}
	if len(r.b) == 0 {
		return Result{} // no extensions: no name
	}
	exts := r.vec(2)
	if !r.ok {
		return Result{}
	}
	var name []byte
	seen := false
	for len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.vec(2)
		if !exts.ok {
			return Result{}
		}
		switch typ {
		case extEncryptedHello:
			return Result{ECH: true}
		case extServerName:
			if seen {
				return Result{} // two server_name extensions: ambiguous, unnamed
			}
			seen = true
			list := data.vec(2)
			for list.ok && len(list.b) > 0 {
				t := list.u8()
				v := list.vec(2)
				if !list.ok {
					return Result{}
				}
				if t == serverNameHost {
					if name != nil {
						return Result{} // RFC 6066: one host_name; two are ambiguous
					}
					name = v.b
				}
			}
			if !list.ok {
				return Result{}
			}
		}
	}
	if n, ok := hostName(name); ok {
		return Result{Name: n, From: SNI}
	}
	return Result{}
}

// hostName checks and normalizes a DNS host name: letters, digits, '-', '_' and dots in
// labels of 1 to 63 bytes, at most 253 bytes, not an IP address; lower case, the trailing
// dot dropped. ok is false for anything else.
func hostName(b []byte) (string, bool) {
	b = bytes.TrimSuffix(b, []byte("."))
	if len(b) == 0 || len(b) > maxNameLen {
		return "", false
	}
	label := 0
	for _, c := range b {
		switch {
		case c == '.':
			if label == 0 {
				return "", false
			}
			label = 0
			continue
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		case 'A' <= c && c <= 'Z':
		default:
			return "", false
		}
		label++
		if label > 63 {
			return "", false
		}
	}
	if label == 0 {
		return "", false
	}
	if _, err := netip.ParseAddr(string(b)); err == nil {
		return "", false // an address is not a name
	}
	return string(bytes.ToLower(b)), true
}
