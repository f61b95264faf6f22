package sniff

import "bytes"

// methods are the HTTP/1 request methods whose requests Sniff reads (RFC 9110 section 9,
// and PATCH). A request line that starts otherwise is not HTTP/1 to Sniff: unnamed.
var methods = [...]string{"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "TRACE ", "CONNECT "}

// httpHost reads the Host header of an HTTP/1 request whose head is whole in b (up to the
// empty line). A head with no Host, two of them, or one that names an address is unnamed.
func httpHost(b []byte) Result {
	method := false
	for _, m := range methods {
		if len(b) < len(m) {
			if bytes.Equal(b, []byte(m[:len(b)])) {
				return Result{More: true} // a prefix of a method: wait for more
			}
			continue
		}
		if string(b[:len(m)]) == m {
			method = true
			break
		}
	}
	if !method {
		return Result{}
	}
	line := bytes.IndexByte(b, '\n')
	if line >= 0 && !bytes.Contains(b[:line], []byte(" HTTP/1.")) {
		return Result{} // HTTP/0.9, HTTP/2's preface, a line of another protocol: unnamed, at once
	}
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		return Result{More: true}
	}
	head := b[:end+2]
	var host []byte
	for rest := head[line+1:]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		h := bytes.TrimSuffix(rest[:i], []byte("\r"))
		rest = rest[i+1:]
		colon := bytes.IndexByte(h, ':')
		if colon < 0 {
			return Result{} // not a header line: unnamed
		}
		if !bytes.EqualFold(h[:colon], []byte("host")) {
			continue
		}
		if host != nil {
			return Result{} // two Host headers (RFC 9112 section 3.2: a 400): unnamed
		}
		host = bytes.TrimSpace(h[colon+1:])
	}
	if host == nil {
		return Result{}
	}
	// host = uri-host [ ":" port ]; a bracketed IPv6 literal is an address, not a name.
	if len(host) > 0 && host[0] == '[' {
		return Result{}
	}
	if i := bytes.LastIndexByte(host, ':'); i >= 0 {
		for _, c := range host[i+1:] {
			if c < '0' || c > '9' {
				return Result{}
			}
		}
		host = host[:i]
	}
	if n, ok := hostName(host); ok {
		return Result{Name: n, From: Host}
	}
	return Result{}
}
