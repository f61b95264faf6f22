package socks5_test

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/router/upstream/socks5"
)

// Wire messages used by the scripts, written out byte by byte.
var (
	greetNoAuth   = h("05 01 00")                             // VER, NMETHODS 1, NO AUTHENTICATION REQUIRED
	greetUserPass = h("05 01 02")                             // VER, NMETHODS 1, USERNAME/PASSWORD
	userPass      = h("01 05") + "agent" + h("06") + "s3cret" // RFC 1929: VER 1, ULEN, UNAME, PLEN, PASSWD
	selNoAuth     = h("05 00")
	selUserPass   = h("05 02")
	authOK        = h("01 00")
	// CONNECT 192.0.2.1:22
	reqIPv4 = h("05 01 00 01 c0 00 02 01 00 16")
	// CONNECT [2001:db8::1]:443
	reqIPv6 = h("05 01 00 04 20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01 01 bb")
	// CONNECT example.com:80
	reqName = h("05 01 00 03 0b") + "example.com" + h("00 50")
	// succeeded, bound 0.0.0.0:0
	repZero = h("05 00 00 01 00 00 00 00 00 00")
	// succeeded, bound 203.0.113.5:40000
	repIPv4 = h("05 00 00 01 cb 00 71 05 9c 40")
	// succeeded, bound [2001:db8::2]:1080
	repIPv6 = h("05 00 00 04 20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 02 04 38")
	// succeeded, bound proxy.example:1080
	repName = h("05 00 00 03 0d") + "proxy.example" + h("04 38")
)

const banner = "SSH-2.0-OpenSSH_9.6\r\n"

var (
	dstIPv4 = socks5.Addr{IP: netip.MustParseAddr("192.0.2.1"), Port: 22}
	dstIPv6 = socks5.Addr{IP: netip.MustParseAddr("2001:db8::1"), Port: 443}
	dstName = socks5.Addr{Name: "example.com", Port: 80}
	creds   = &socks5.Auth{Username: "agent", Password: "s3cret"}
)

// modes runs f for each way of driving a handshake: pipelined or in lock
// step, with the server's bytes read whole or one at a time.
func modes(t *testing.T, f func(t *testing.T, pipeline, oneByte bool)) {
	for _, pipeline := range []bool{false, true} {
		for _, oneByte := range []bool{false, true} {
			name := fmt.Sprintf("pipeline=%v/onebyte=%v", pipeline, oneByte)
			t.Run(name, func(t *testing.T) { f(t, pipeline, oneByte) })
		}
	}
}

func TestHandshakeSuccess(t *testing.T) {
	tests := []struct {
		name    string
		auth    *socks5.Auth
		dst     socks5.Addr
		client  []string // the client's messages
		server  []string // the server's answers
		wantBnd socks5.Addr
	}{
		{"noauth-ipv4", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{selNoAuth, repZero},
			socks5.Addr{IP: netip.MustParseAddr("0.0.0.0")}},
		{"noauth-ipv6", nil, dstIPv6,
			[]string{greetNoAuth, reqIPv6}, []string{selNoAuth, repIPv6},
			socks5.Addr{IP: netip.MustParseAddr("2001:db8::2"), Port: 1080}},
		{"noauth-name", nil, dstName,
			[]string{greetNoAuth, reqName}, []string{selNoAuth, repIPv4},
			socks5.Addr{IP: netip.MustParseAddr("203.0.113.5"), Port: 40000}},
		{"noauth-ipv4-mapped-sent-as-ipv4", nil,
			socks5.Addr{IP: netip.MustParseAddr("::ffff:192.0.2.1"), Port: 22},
			[]string{greetNoAuth, reqIPv4}, []string{selNoAuth, repZero},
			socks5.Addr{IP: netip.MustParseAddr("0.0.0.0")}},
		{"name-wins-over-ip", nil,
			socks5.Addr{Name: "example.com", IP: netip.MustParseAddr("198.18.0.7"), Port: 80},
			[]string{greetNoAuth, reqName}, []string{selNoAuth, repZero},
			socks5.Addr{IP: netip.MustParseAddr("0.0.0.0")}},
		{"reply-binds-name", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{selNoAuth, repName},
			socks5.Addr{Name: "proxy.example", Port: 1080}},
		{"reply-rsv-nonzero-tolerated", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{selNoAuth, h("05 00 ff 01 7f 00 00 01 00 50")},
			socks5.Addr{IP: netip.MustParseAddr("127.0.0.1"), Port: 80}},
		{"userpass-ipv4", creds, dstIPv4,
			[]string{greetUserPass, userPass, reqIPv4}, []string{selUserPass, authOK, repIPv4},
			socks5.Addr{IP: netip.MustParseAddr("203.0.113.5"), Port: 40000}},
		{"userpass-name", creds, dstName,
			[]string{greetUserPass, userPass, reqName}, []string{selUserPass, authOK, repZero},
			socks5.Addr{IP: netip.MustParseAddr("0.0.0.0")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modes(t, func(t *testing.T, pipeline, oneByte bool) {
				conn, wantWritten := conversation(pipeline, tt.client, tt.server, banner, len(tt.client))
				conn.oneByte = oneByte
				c := socks5.Client{Auth: tt.auth, Pipeline: pipeline}
				got, err := c.Handshake(conn, tt.dst)
				if conn.err != nil {
					t.Fatalf("script: %v", conn.err)
				}
				if err != nil {
					t.Fatalf("Handshake: %v", err)
				}
				if got != tt.wantBnd {
					t.Errorf("bound = %+v, want %+v", got, tt.wantBnd)
				}
				if string(conn.written) != wantWritten {
					t.Errorf("client wrote\n% x\nwant\n% x", conn.written, wantWritten)
				}
				wantWrites := len(tt.client)
				if pipeline {
					wantWrites = 1
				}
				if conn.writes != wantWrites {
					t.Errorf("writes = %d, want %d", conn.writes, wantWrites)
				}
				// The target's first bytes follow the reply and belong to
				// the relay: Handshake must not have read any of them.
				if rest := conn.in.String(); rest != banner {
					t.Errorf("left unread %q, want the banner %q", rest, banner)
				}
			})
		})
	}
}

func TestHandshakeFailure(t *testing.T) {
	tests := []struct {
		name    string
		auth    *socks5.Auth
		dst     socks5.Addr
		client  []string
		server  []string // answers up to the failing one; the server then closes
		wantIs  error    // errors.Is target, or nil
		wantRep int      // REP wanted in a *ReplyError, or -1 for none
		wantMsg string   // substring of the error
	}{
		{"greeting-no-acceptable-noauth", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{h("05 ff")},
			socks5.ErrNoAcceptableMethods, -1, "socks5 greeting: no acceptable authentication methods (offered only no authentication)"},
		{"greeting-no-acceptable-userpass", creds, dstIPv4,
			[]string{greetUserPass, userPass, reqIPv4}, []string{h("05 ff")},
			socks5.ErrNoAcceptableMethods, -1, "socks5 greeting: no acceptable authentication methods (offered only username/password)"},
		{"greeting-unoffered-noauth-when-auth-set", creds, dstIPv4,
			[]string{greetUserPass, userPass, reqIPv4}, []string{selNoAuth},
			nil, -1, "socks5 greeting: server chose method 0x00, but only username/password (0x02) was offered"},
		{"greeting-unoffered-userpass-when-no-auth", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{selUserPass},
			nil, -1, "socks5 greeting: server chose method 0x02, but only no authentication (0x00) was offered"},
		{"greeting-wrong-version", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{h("04 00")},
			nil, -1, "socks5 greeting: server version 0x04, want 0x05"},
		{"greeting-http-answer", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{"HTTP/1.1 400 Bad Request\r\n"},
			nil, -1, "socks5 greeting: server version 0x48, want 0x05"},
		{"auth-rejected", creds, dstIPv4,
			[]string{greetUserPass, userPass, reqIPv4}, []string{selUserPass, h("01 01")},
			socks5.ErrAuthFailed, -1, `socks5 auth: credentials rejected for user "agent" (status 0x01)`},
		{"auth-wrong-version", creds, dstIPv4,
			[]string{greetUserPass, userPass, reqIPv4}, []string{selUserPass, h("05 00")},
			nil, -1, "socks5 auth: reply version 0x05, want 0x01"},
		{"reply-wrong-version", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{selNoAuth, h("04 00 00 01 00 00 00 00 00 00")},
			nil, -1, "socks5 connect: reply version 0x04, want 0x05"},
		{"reply-unknown-atyp", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{selNoAuth, h("05 00 00 02 00 00 00")},
			nil, -1, "socks5 connect: reply address type 0x02 unknown"},
		{"reply-empty-name", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{selNoAuth, h("05 00 00 03 00 00 00")},
			nil, -1, "socks5 connect: reply has an empty host name"},
		{"reply-refused-short", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{selNoAuth, h("05 05")},
			io.ErrUnexpectedEOF, 5, "socks5 connect: connection refused (reply 0x05); read reply: unexpected EOF"},
		{"reply-refused-unknown-atyp", nil, dstIPv4,
			[]string{greetNoAuth, reqIPv4}, []string{selNoAuth, h("05 05 00 09 00 00 00")},
			nil, 5, "socks5 connect: connection refused (reply 0x05); reply address type 0x09 unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modes(t, func(t *testing.T, pipeline, oneByte bool) {
				conn, wantWritten := conversation(pipeline, tt.client, tt.server, "", len(tt.server))
				conn.oneByte = oneByte
				c := socks5.Client{Auth: tt.auth, Pipeline: pipeline}
				got, err := c.Handshake(conn, tt.dst)
				if conn.err != nil {
					t.Fatalf("script: %v", conn.err)
				}
				if err == nil {
					t.Fatalf("Handshake = %+v, nil; want an error", got)
				}
				if got != (socks5.Addr{}) {
					t.Errorf("bound = %+v on error, want zero", got)
				}
				if !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("error %q, want it to contain %q", err, tt.wantMsg)
				}
				if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
					t.Errorf("errors.Is(%v, %v) = false", err, tt.wantIs)
				}
				var re *socks5.ReplyError
				switch gotAs := errors.As(err, &re); {
				case tt.wantRep < 0 && gotAs:
					t.Errorf("error %v has a ReplyError (code 0x%02x), want none", err, re.Code)
				case tt.wantRep >= 0 && !gotAs:
					t.Errorf("error %v has no ReplyError, want code 0x%02x", err, tt.wantRep)
				case tt.wantRep >= 0 && re.Code != byte(tt.wantRep):
					t.Errorf("ReplyError code 0x%02x, want 0x%02x", re.Code, tt.wantRep)
				}
				if string(conn.written) != wantWritten {
					t.Errorf("client wrote\n% x\nwant\n% x", conn.written, wantWritten)
				}
			})
		})
	}
}

func TestHandshakeEveryReplyCode(t *testing.T) {
	wantText := map[byte]string{
		0x01: "general SOCKS server failure",
		0x02: "connection not allowed by ruleset",
		0x03: "network unreachable",
		0x04: "host unreachable",
		0x05: "connection refused",
		0x06: "TTL expired",
		0x07: "command not supported",
		0x08: "address type not supported",
		0x09: "unassigned reply code",
		0x7f: "unassigned reply code",
		0xff: "unassigned reply code",
	}
	for code := 1; code <= 0xff; code++ {
		want, ok := wantText[byte(code)]
		if !ok {
			continue
		}
		t.Run(fmt.Sprintf("0x%02x", code), func(t *testing.T) {
			modes(t, func(t *testing.T, pipeline, oneByte bool) {
				rep := h("05") + string([]byte{byte(code)}) + h("00 01 00 00 00 00 00 00")
				conn, _ := conversation(pipeline, []string{greetNoAuth, reqIPv4}, []string{selNoAuth, rep}, "", 2)
				conn.oneByte = oneByte
				c := socks5.Client{Pipeline: pipeline}
				_, err := c.Handshake(conn, dstIPv4)
				var re *socks5.ReplyError
				if !errors.As(err, &re) {
					t.Fatalf("error %v is not a *ReplyError", err)
				}
				if re.Code != byte(code) {
					t.Errorf("Code = 0x%02x, want 0x%02x", re.Code, code)
				}
				wantErr := fmt.Sprintf("socks5 connect: %s (reply 0x%02x)", want, code)
				if err.Error() != wantErr {
					t.Errorf("error %q, want %q", err, wantErr)
				}
				if conn.in.Len() != 0 {
					t.Errorf("%d bytes of the reply left unread", conn.in.Len())
				}
			})
		})
	}
}

// TestHandshakeTruncated cuts the server's answers after every byte count:
// each cut is an error wrapping io.EOF or io.ErrUnexpectedEOF, and the
// client never sends a message before the answer to the one before.
func TestHandshakeTruncated(t *testing.T) {
	tests := []struct {
		name   string
		auth   *socks5.Auth
		dst    socks5.Addr
		client []string
		server []string
	}{
		{"noauth-ipv4", nil, dstIPv4, []string{greetNoAuth, reqIPv4}, []string{selNoAuth, repIPv4}},
		{"noauth-ipv6-reply", nil, dstIPv4, []string{greetNoAuth, reqIPv4}, []string{selNoAuth, repIPv6}},
		{"noauth-name-reply", nil, dstName, []string{greetNoAuth, reqName}, []string{selNoAuth, repName}},
		{"userpass", creds, dstIPv4, []string{greetUserPass, userPass, reqIPv4}, []string{selUserPass, authOK, repZero}},
	}
	for _, tt := range tests {
		total := len(strings.Join(tt.server, ""))
		for n := 0; n < total; n++ {
			t.Run(fmt.Sprintf("%s/%d-of-%d", tt.name, n, total), func(t *testing.T) {
				for _, pipeline := range []bool{false, true} {
					answers := cut(tt.server, n)
					complete := 0
					for i, a := range answers {
						if a == tt.server[i] {
							complete++
						}
					}
					sent := min(complete+1, len(tt.client))
					conn, wantWritten := conversation(pipeline, tt.client, answers, "", sent)
					c := socks5.Client{Auth: tt.auth, Pipeline: pipeline}
					_, err := c.Handshake(conn, tt.dst)
					if conn.err != nil {
						t.Fatalf("pipeline=%v: script: %v", pipeline, conn.err)
					}
					if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Errorf("pipeline=%v: error %v, want io.EOF or io.ErrUnexpectedEOF", pipeline, err)
					}
					if string(conn.written) != wantWritten {
						t.Errorf("pipeline=%v: client wrote\n% x\nwant\n% x", pipeline, conn.written, wantWritten)
					}
				}
			})
		}
	}
}

func TestHandshakeInvalidInput(t *testing.T) {
	long := strings.Repeat("a", 256)
	tests := []struct {
		name    string
		auth    *socks5.Auth
		dst     socks5.Addr
		wantMsg string
	}{
		{"zero-dst", nil, socks5.Addr{}, "socks5 connect: invalid destination: address has neither a host name nor an IP"},
		{"port-only", nil, socks5.Addr{Port: 80}, "socks5 connect: invalid destination: address has neither a host name nor an IP"},
		{"name-256", nil, socks5.Addr{Name: long, Port: 80}, "socks5 connect: invalid destination: host name is 256 bytes, want 1..255"},
		{"empty-username", &socks5.Auth{Password: "pw"}, dstIPv4, "socks5 auth: username is 0 bytes, want 1..255"},
		{"empty-password", &socks5.Auth{Username: "u"}, dstIPv4, "socks5 auth: password is 0 bytes, want 1..255"},
		{"long-username", &socks5.Auth{Username: long, Password: "pw"}, dstIPv4, "socks5 auth: username is 256 bytes, want 1..255"},
		{"long-password", &socks5.Auth{Username: "u", Password: "P" + long}, dstIPv4, "socks5 auth: password is 257 bytes, want 1..255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, pipeline := range []bool{false, true} {
				conn := newScript(true)
				c := socks5.Client{Auth: tt.auth, Pipeline: pipeline}
				_, err := c.Handshake(conn, tt.dst)
				if err == nil || err.Error() != tt.wantMsg {
					t.Errorf("pipeline=%v: error %v, want %q", pipeline, err, tt.wantMsg)
				}
				if conn.writes != 0 {
					t.Errorf("pipeline=%v: %d writes before the input was checked, want 0", pipeline, conn.writes)
				}
			}
		})
	}
}

func TestHandshakeLimits(t *testing.T) {
	// The longest name and credentials fit the single buffer in both modes.
	name := strings.Repeat("n", 255)
	auth := &socks5.Auth{Username: strings.Repeat("u", 255), Password: strings.Repeat("p", 255)}
	dst := socks5.Addr{Name: name, Port: 443}
	client := []string{
		greetUserPass,
		h("01 ff") + auth.Username + h("ff") + auth.Password,
		h("05 01 00 03 ff") + name + h("01 bb"),
	}
	server := []string{selUserPass, authOK, h("05 00 00 03 ff") + name + h("01 bb")}
	modes(t, func(t *testing.T, pipeline, oneByte bool) {
		conn, wantWritten := conversation(pipeline, client, server, banner, 3)
		conn.oneByte = oneByte
		c := socks5.Client{Auth: auth, Pipeline: pipeline}
		got, err := c.Handshake(conn, dst)
		if err != nil {
			t.Fatalf("Handshake: %v (script: %v)", err, conn.err)
		}
		if got != dst {
			t.Errorf("bound = %v, want %v", got, dst)
		}
		if string(conn.written) != wantWritten {
			t.Errorf("client wrote %d bytes, want %d", len(conn.written), len(wantWritten))
		}
		if conn.in.String() != banner {
			t.Errorf("left unread %q, want %q", conn.in.String(), banner)
		}
	})
}

// errWriter fails every write.
type errWriter struct{ io.Reader }

func (errWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestHandshakeWriteError(t *testing.T) {
	for _, pipeline := range []bool{false, true} {
		c := socks5.Client{Pipeline: pipeline}
		_, err := c.Handshake(errWriter{strings.NewReader("")}, dstIPv4)
		want := "socks5 greeting: write: broken pipe"
		if err == nil || err.Error() != want {
			t.Errorf("pipeline=%v: error %v, want %q", pipeline, err, want)
		}
	}
}
