package socks5_test

import (
	"io"
	"testing"

	"github.com/agentcage/router/router/upstream/socks5"
)

// memConn answers every handshake with the same server bytes and discards
// what the client writes. It does not allocate.
type memConn struct {
	resp []byte
	off  int
}

func (c *memConn) Read(p []byte) (int, error) {
	if c.off >= len(c.resp) {
		return 0, io.EOF
	}
	n := copy(p, c.resp[c.off:])
	c.off += n
	return n, nil
}

func (c *memConn) Write(p []byte) (int, error) { return len(p), nil }

var benchCases = []struct {
	name string
	auth *socks5.Auth
	dst  socks5.Addr
	resp string
}{
	{"noauth-ipv4", nil, dstIPv4, selNoAuth + repZero},
	{"noauth-name", nil, dstName, selNoAuth + repIPv4},
	{"userpass-name", creds, dstName, selUserPass + authOK + repIPv4},
}

func BenchmarkHandshake(b *testing.B) {
	for _, bc := range benchCases {
		for _, pipeline := range []bool{false, true} {
			name := bc.name + "/lockstep"
			if pipeline {
				name = bc.name + "/pipeline"
			}
			b.Run(name, func(b *testing.B) {
				conn := &memConn{resp: []byte(bc.resp)}
				var rw io.ReadWriter = conn
				c := socks5.Client{Auth: bc.auth, Pipeline: pipeline}
				b.ReportAllocs()
				for b.Loop() {
					conn.off = 0
					if _, err := c.Handshake(rw, bc.dst); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestHandshakeAllocs pins the allocation count that BenchmarkHandshake
// reports: one buffer per handshake, whatever the mode (a reply that binds
// a host name adds one for the name).
func TestHandshakeAllocs(t *testing.T) {
	for _, bc := range benchCases {
		for _, pipeline := range []bool{false, true} {
			conn := &memConn{resp: []byte(bc.resp)}
			var rw io.ReadWriter = conn
			c := socks5.Client{Auth: bc.auth, Pipeline: pipeline}
			got := testing.AllocsPerRun(50, func() {
				conn.off = 0
				if _, err := c.Handshake(rw, bc.dst); err != nil {
					t.Fatal(err)
				}
			})
			if got != 1 {
				t.Errorf("%s pipeline=%v: %v allocs per handshake, want 1", bc.name, pipeline, got)
			}
		}
	}
}
