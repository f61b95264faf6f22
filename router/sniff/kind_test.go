package sniff

import (
	"bytes"
	"testing"
)

// TestKindOf: an HTTP/1 request is told from its request line, TLS from its first byte, and
// anything else at once; a prefix that may still be a request waits for more.
func TestKindOf(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want Kind
	}{
		{"empty", nil, KindMore},
		{"method prefix", []byte("GE"), KindMore},
		{"request line in progress", []byte("GET /index.html HTT"), KindMore},
		{"request line", []byte("GET / HTTP/1.1\r\n"), KindHTTP},
		{"whole request", []byte("POST /x HTTP/1.0\r\nHost: a.test\r\n\r\n"), KindHTTP},
		{"lone LF", []byte("HEAD / HTTP/1.1\n"), KindHTTP},
		{"HTTP/2 preface", []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), KindOther},
		{"HTTP/0.9", []byte("GET /\r\n"), KindOther},
		{"TLS record", []byte{0x16, 0x03, 0x01}, KindTLS},
		{"SSH banner", []byte("SSH-2.0-x\r\n"), KindOther},
		{"lower case method", []byte("get / HTTP/1.1\r\n"), KindOther},
		{"binary", []byte{0, 1, 2}, KindOther},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := KindOf(c.in); got != c.want {
				t.Errorf("KindOf(%q) = %v, want %v", c.in, got, c.want)
			}
		})
	}
	long := append([]byte("GET /"), bytes.Repeat([]byte("a"), Max)...)
	if got := KindOf(long); got != KindOther {
		t.Errorf("a request line over Max: %v, want %v", got, KindOther)
	}
}

func FuzzKindOf(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Add([]byte("GET /"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00})
	f.Add([]byte("SSH-2.0-x\r\n"))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k := untouched(t, "KindOf", KindOf, b)
		if k == KindMore && len(b) >= Max {
			t.Fatalf("more asked of %d bytes", len(b))
		}
		if k == KindHTTP && !bytes.Contains(b, []byte(" HTTP/1.")) {
			t.Fatalf("%q is no HTTP/1 request line", b)
		}
		// More bytes never turn an answer into another one.
		if k != KindMore {
			if k2 := KindOf(append(bytes.Clone(b), "x\r\n"...)); k2 != k && len(b) < Max {
				t.Fatalf("KindOf(%q) = %v, then %v with more bytes", b, k, k2)
			}
		}
	})
}
