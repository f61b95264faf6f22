package sniff

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// realHello is the first bytes crypto/tls sends as a client for serverName.
func realHello(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == ""})
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Handshake() // fails once b is closed
	}()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// hello builds a ClientHello record by hand with the given extensions (type, data).
func hello(exts ...[2][]byte) []byte {
	var e []byte
	for _, x := range exts {
		e = append(e, x[0]...)
		e = append(e, byte(len(x[1])>>8), byte(len(x[1])))
		e = append(e, x[1]...)
	}
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session id
	body = append(body, 0, 2, 0x13, 0x01)    // cipher suites
	body = append(body, 1, 0)                // compression
	body = append(body, byte(len(e)>>8), byte(len(e)))
	body = append(body, e...)
	msg := append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	return records(msg, len(msg))
}

// records cuts a handshake message into TLS records of at most size bytes each.
func records(msg []byte, size int) []byte {
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, 0x16, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

func sni(names ...string) [2][]byte {
	var list []byte
	for _, n := range names {
		list = append(list, 0, byte(len(n)>>8), byte(len(n)))
		list = append(list, n...)
	}
	return [2][]byte{{0, 0}, append([]byte{byte(len(list) >> 8), byte(len(list))}, list...)}
}

func ext(typ uint16, data []byte) [2][]byte { return [2][]byte{{byte(typ >> 8), byte(typ)}, data} }

// message is the handshake message inside a single-record hello.
func message(rec []byte) []byte { return rec[5:] }

func TestSniff(t *testing.T) {
	real := realHello(t, "Allowed.Test")
	big := hello(sni("big.test"), ext(0x0015, make([]byte, 9000))) // padding: 9 KB
	huge := hello(sni("huge.test"), ext(0x0015, make([]byte, Max)))
	for _, c := range []struct {
		name string
		in   []byte
		want Result
	}{
		{"empty", nil, Result{More: true}},
		{"crypto/tls hello", real, Result{Name: "allowed.test", From: SNI}},
		{"crypto/tls hello, first byte", real[:1], Result{More: true}},
		{"crypto/tls hello, header only", real[:5], Result{More: true}},
		{"crypto/tls hello, truncated", real[:len(real)-1], Result{More: true}},
		{"crypto/tls hello and more bytes", append(append([]byte{}, real...), 0x17, 3, 3, 0, 1, 0), Result{Name: "allowed.test", From: SNI}},
		{"hello over several records", records(message(real), 100), Result{Name: "allowed.test", From: SNI}},
		{"hello over one-byte records", records(message(real), 1), Result{Name: "allowed.test", From: SNI}},
		{"hello over records, the last cut", records(message(real), 100)[:300], Result{More: true}},
		{"no server name", hello(), Result{}},
		{"trailing dot", hello(sni("a.test.")), Result{Name: "a.test", From: SNI}},
		{"ECH", hello(sni("public.provider.test"), ext(0xfe0d, []byte{0, 1, 2})), Result{ECH: true}},
		{"ECH before the name", hello(ext(0xfe0d, nil), sni("public.provider.test")), Result{ECH: true}},
		{"two names", hello(sni("a.test", "b.test")), Result{}},
		{"two server_name extensions", hello(sni("a.test"), sni("b.test")), Result{}},
		{"an address for a name", hello(sni("192.0.2.1")), Result{}},
		{"a bad name", hello(sni("a b.test")), Result{}},
		{"an empty label", hello(sni("a..test")), Result{}},
		{"a name too long", hello(sni(strings.Repeat("a.", 127) + "aa")), Result{}},
		{"big hello over records", records(message(big), 4000), Result{Name: "big.test", From: SNI}},
		{"huge hello", huge, Result{}},
		{"huge hello, cut at Max", huge[:Max], Result{}},
		{"not a client hello", []byte{0x16, 3, 1, 0, 4, 2, 0, 0, 0}, Result{}},
		{"an alert", []byte{0x15, 3, 1, 0, 2, 2, 40}, Result{}},
		{"SSLv2-ish", []byte{0x16, 2, 0, 0, 1}, Result{}},
		{"record too long", []byte{0x16, 3, 1, 0xff, 0xff}, Result{}},
		{"zero-length record", []byte{0x16, 3, 1, 0, 0}, Result{}},
		{"extension length past the end", func() []byte {
			h := hello(sni("a.test"))
			h[len(h)-len("a.test")-3]++ // the host_name's length
			return h
		}(), Result{}},
		{"http get", []byte("GET / HTTP/1.1\r\nHost: Allowed.Test\r\nAccept: */*\r\n\r\n"), Result{Name: "allowed.test", From: Host}},
		{"http with port", []byte("POST /x HTTP/1.1\r\nhost: allowed.test:8080\r\n\r\nbody"), Result{Name: "allowed.test", From: Host}},
		{"http head incomplete", []byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n"), Result{More: true}},
		{"http method prefix", []byte("GE"), Result{More: true}},
		{"http no host", []byte("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"), Result{}},
		{"http two hosts", []byte("GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"), Result{}},
		{"http host an address", []byte("GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n"), Result{}},
		{"http host v6", []byte("GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n"), Result{}},
		{"http bad port", []byte("GET / HTTP/1.1\r\nHost: a.test:x\r\n\r\n"), Result{}},
		{"http/1.0 no version", []byte("GET /\r\nHost: a.test\r\n\r\n"), Result{}},
		{"http/2 preface", []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Result{}},
		{"ssh banner", []byte("SSH-2.0-OpenSSH_9.6\r\n"), Result{}},
		{"a line of another protocol", []byte("GET 1024\n"), Result{}},
		{"http request line, head not in", []byte("GET / HTTP/1.1\r\n"), Result{More: true}},
		{"http header without colon", []byte("GET / HTTP/1.1\r\nHost a.test\r\n\r\n"), Result{}},
		{"http head over Max", append([]byte("GET / HTTP/1.1\r\nX: "), bytes.Repeat([]byte("a"), Max)...), Result{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Sniff(c.in); got != c.want {
				t.Errorf("Sniff = %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestPrefixes: every prefix of a hello or a request is either still waiting or has the
// whole answer; none names anything else.
func TestPrefixes(t *testing.T) {
	for _, in := range [][]byte{realHello(t, "a.test"), records(message(realHello(t, "a.test")), 7), []byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")} {
		for i := range len(in) {
			if got := Sniff(in[:i]); !got.More {
				t.Fatalf("prefix %d of %q: %+v, want More", i, in, got)
			}
		}
		if got := Sniff(in); got.Name != "a.test" {
			t.Fatalf("whole: %+v", got)
		}
	}
}

func TestOrigin(t *testing.T) {
	if None.String() != "" || SNI.String() != "sni" || Host.String() != "host" {
		t.Error(None, SNI, Host)
	}
}

// untouched is fn(b), named name for the error; the test fails if fn modified b.
func untouched[R any](t *testing.T, name string, fn func([]byte) R, b []byte) R {
	t.Helper()
	in := bytes.Clone(b)
	r := fn(b)
	if !bytes.Equal(in, b) {
		t.Fatalf("%s modified its input", name)
	}
	return r
}

func FuzzSniff(f *testing.F) {
	f.Add(realHello(f, "allowed.test"))
	f.Add(records(message(realHello(f, "allowed.test")), 50))
	f.Add(hello(sni("a.test"), ext(0xfe0d, nil)))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Add([]byte("SSH-2.0-x\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := untouched(t, "Sniff", Sniff, b)
		if r.Name != "" && (r.From == None || r.More || r.ECH) || r.Name == "" && r.From != None {
			t.Fatalf("inconsistent %+v", r)
		}
		if r.Name != "" {
			if n, ok := hostName([]byte(r.Name)); !ok || n != r.Name {
				t.Fatalf("name %q is not a normalized host name", r.Name)
			}
		}
		if r.More && len(b) >= Max {
			t.Fatal("More past Max")
		}
	})
}
