package socks5_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/router/upstream/socks5"
)

// Wire messages of UDP ASSOCIATE and of relayed datagrams.
var (
	// UDP ASSOCIATE from 0.0.0.0:0 (the client does not know its address)
	assocZero = h("05 03 00 01 00 00 00 00 00 00")
	// UDP ASSOCIATE from 192.0.2.9:5353
	assocIPv4 = h("05 03 00 01 c0 00 02 09 14 e9")
	// succeeded, relay at 203.0.113.5:40000
	repRelay = repIPv4
)

func TestAssociateSuccess(t *testing.T) {
	relay := socks5.Addr{IP: netip.MustParseAddr("203.0.113.5"), Port: 40000}
	tests := []struct {
		name      string
		auth      *socks5.Auth
		from      socks5.Addr
		client    []string
		server    []string
		wantRelay socks5.Addr
	}{
		{"noauth-zero-from", nil, socks5.Addr{}, []string{greetNoAuth, assocZero}, []string{selNoAuth, repRelay}, relay},
		{"noauth-from-ipv4", nil, socks5.Addr{IP: netip.MustParseAddr("192.0.2.9"), Port: 5353},
			[]string{greetNoAuth, assocIPv4}, []string{selNoAuth, repRelay}, relay},
		{"userpass", creds, socks5.Addr{}, []string{greetUserPass, userPass, assocZero}, []string{selUserPass, authOK, repRelay}, relay},
		{"relay-unspecified", nil, socks5.Addr{}, []string{greetNoAuth, assocZero},
			[]string{selNoAuth, h("05 00 00 01 00 00 00 00 9c 40")}, socks5.Addr{IP: netip.IPv4Unspecified(), Port: 40000}},
		{"relay-ipv6", nil, socks5.Addr{}, []string{greetNoAuth, assocZero}, []string{selNoAuth, repIPv6},
			socks5.Addr{IP: netip.MustParseAddr("2001:db8::2"), Port: 1080}},
		{"relay-name", creds, socks5.Addr{}, []string{greetUserPass, userPass, assocZero}, []string{selUserPass, authOK, repName},
			socks5.Addr{Name: "proxy.example", Port: 1080}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modes(t, func(t *testing.T, pipeline, oneByte bool) {
				// Nothing follows the reply on a control connection; a
				// trailer checks that Associate reads no byte past it.
				conn, wantWritten := conversation(pipeline, tt.client, tt.server, "x", len(tt.client))
				conn.oneByte = oneByte
				c := socks5.Client{Auth: tt.auth, Pipeline: pipeline}
				got, err := c.Associate(conn, tt.from)
				if conn.err != nil {
					t.Fatalf("script: %v", conn.err)
				}
				if err != nil {
					t.Fatalf("Associate: %v", err)
				}
				if got != tt.wantRelay {
					t.Errorf("relay = %+v, want %+v", got, tt.wantRelay)
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
				if rest := conn.in.String(); rest != "x" {
					t.Errorf("left unread %q, want %q", rest, "x")
				}
			})
		})
	}
}

func TestAssociateFailure(t *testing.T) {
	tests := []struct {
		name    string
		auth    *socks5.Auth
		client  []string
		server  []string
		wantIs  error
		wantRep int
		wantMsg string
	}{
		{"command-not-supported", nil, []string{greetNoAuth, assocZero}, []string{selNoAuth, h("05 07 00 01 00 00 00 00 00 00")},
			nil, int(socks5.RepCommandNotSupported), "socks5 associate: command not supported (reply 0x07)"},
		{"not-allowed-cut", nil, []string{greetNoAuth, assocZero}, []string{selNoAuth, h("05 02")},
			nil, int(socks5.RepNotAllowed), "socks5 associate: connection not allowed by ruleset (reply 0x02); read reply: unexpected EOF"},
		{"auth-rejected", creds, []string{greetUserPass, userPass, assocZero}, []string{selUserPass, h("01 01")},
			socks5.ErrAuthFailed, -1, `socks5 auth: credentials rejected for user "agent" (status 0x01)`},
		{"no-acceptable", nil, []string{greetNoAuth, assocZero}, []string{h("05 ff")},
			socks5.ErrNoAcceptableMethods, -1, "socks5 greeting: no acceptable authentication methods"},
		{"closed-before-reply", nil, []string{greetNoAuth, assocZero}, []string{selNoAuth},
			nil, -1, "socks5 associate: read reply: EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modes(t, func(t *testing.T, pipeline, oneByte bool) {
				conn, _ := conversation(pipeline, tt.client, tt.server, "", len(tt.server))
				conn.oneByte = oneByte
				c := socks5.Client{Auth: tt.auth, Pipeline: pipeline}
				got, err := c.Associate(conn, socks5.Addr{})
				if err == nil {
					t.Fatalf("Associate succeeded with relay %v, want an error", got)
				}
				if got != (socks5.Addr{}) {
					t.Errorf("relay %+v with an error, want the zero Addr", got)
				}
				if !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("error %q, want it to contain %q", err, tt.wantMsg)
				}
				if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
					t.Errorf("error %v, want errors.Is %v", err, tt.wantIs)
				}
				var re *socks5.ReplyError
				if gotAs := errors.As(err, &re); gotAs != (tt.wantRep >= 0) || gotAs && re.Code != byte(tt.wantRep) {
					t.Errorf("errors.As ReplyError = %v %+v, want code %d", gotAs, re, tt.wantRep)
				}
			})
		})
	}
}

func TestAssociateInvalidFrom(t *testing.T) {
	c := socks5.Client{}
	_, err := c.Associate(newScript(true), socks5.Addr{Name: strings.Repeat("x", 256)})
	if want := "socks5 associate: invalid destination: host name is 256 bytes, want 1..255"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestAppendUDPHeader(t *testing.T) {
	tests := []struct {
		name string
		dst  socks5.Addr
		want string
	}{
		{"ipv4", dstIPv4, h("00 00 00 01 c0 00 02 01 00 16")},
		{"ipv4-mapped", socks5.Addr{IP: netip.MustParseAddr("::ffff:192.0.2.1"), Port: 22}, h("00 00 00 01 c0 00 02 01 00 16")},
		{"ipv6", dstIPv6, h("00 00 00 04 20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01 01 bb")},
		// A fake-IP flow: the name goes to the relay, the IP does not.
		{"name-wins", socks5.Addr{Name: "example.com", IP: netip.MustParseAddr("198.18.0.7"), Port: 443},
			h("00 00 00 03 0b") + "example.com" + h("01 bb")},
		{"name-max", socks5.Addr{Name: strings.Repeat("n", 255), Port: 53}, h("00 00 00 03 ff") + strings.Repeat("n", 255) + h("00 35")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := socks5.AppendUDPHeader([]byte("xyz"), tt.dst)
			if err != nil {
				t.Fatalf("AppendUDPHeader: %v", err)
			}
			if string(got) != "xyz"+tt.want {
				t.Errorf("got\n% x\nwant\n% x", got, "xyz"+tt.want)
			}
			if len(tt.want) > socks5.MaxUDPHeaderLen {
				t.Errorf("header of %d bytes, longer than MaxUDPHeaderLen %d", len(tt.want), socks5.MaxUDPHeaderLen)
			}
		})
	}
	for _, bad := range []socks5.Addr{{}, {Name: strings.Repeat("x", 256)}} {
		got, err := socks5.AppendUDPHeader([]byte("keep"), bad)
		if err == nil || string(got) != "keep" {
			t.Errorf("AppendUDPHeader(%+v) = %q, %v; want the buffer unchanged and an error", bad, got, err)
		}
	}
	buf := make([]byte, 0, socks5.MaxUDPHeaderLen)
	if allocs := testing.AllocsPerRun(100, func() { _, _ = socks5.AppendUDPHeader(buf[:0], dstName) }); allocs != 0 {
		t.Errorf("AppendUDPHeader allocates %v times with room in buf, want 0", allocs)
	}
}

func TestParseUDPHeader(t *testing.T) {
	const payload = "\x12\x34payload"
	tests := []struct {
		name    string
		in      string // the header; payload follows when wantErr is ""
		want    socks5.Addr
		wantErr string
	}{
		{"ipv4", h("00 00 00 01 c0 00 02 01 00 35"), socks5.Addr{IP: netip.MustParseAddr("192.0.2.1"), Port: 53}, ""},
		{"ipv6", h("00 00 00 04 20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01 01 bb"), socks5.Addr{IP: netip.MustParseAddr("2001:db8::1"), Port: 443}, ""},
		{"ipv6-mapped-kept", h("00 00 00 04 00 00 00 00 00 00 00 00 00 00 ff ff c0 00 02 01 00 35"),
			socks5.Addr{IP: netip.MustParseAddr("::ffff:192.0.2.1"), Port: 53}, ""},
		{"name", h("00 00 00 03 0b") + "example.com" + h("01 bb"), socks5.Addr{Name: "example.com", Port: 443}, ""},
		{"rsv-tolerated", h("ab cd 00 01 7f 00 00 01 00 07"), socks5.Addr{IP: netip.MustParseAddr("127.0.0.1"), Port: 7}, ""},
		{"frag-1", h("00 00 01 01 c0 00 02 01 00 35"), socks5.Addr{}, "udp header: FRAG 0x01: fragmented datagram (FRAG not zero) not supported"},
		{"frag-last", h("00 00 81 01 c0 00 02 01 00 35"), socks5.Addr{}, "udp header: FRAG 0x81: fragmented datagram (FRAG not zero) not supported"},
		{"empty", "", socks5.Addr{}, "udp header: 0 bytes, shorter than its fixed part"},
		{"fixed-cut", h("00 00 00"), socks5.Addr{}, "udp header: 3 bytes, shorter than its fixed part"},
		{"ipv4-cut", h("00 00 00 01 c0 00 02 01 00"), socks5.Addr{}, "udp header: 9 bytes, want 10 for its address"},
		{"ipv6-cut", h("00 00 00 04 20 01"), socks5.Addr{}, "udp header: 6 bytes, want 22 for its address"},
		{"name-len-cut", h("00 00 00 03"), socks5.Addr{}, "udp header: cut short in the name's length"},
		{"name-cut", h("00 00 00 03 05") + "abc", socks5.Addr{}, "udp header: 8 bytes, want 12 for its address"},
		{"name-empty", h("00 00 00 03 00 00 35"), socks5.Addr{}, "udp header: empty host name"},
		{"atyp-0", h("00 00 00 00 00 00"), socks5.Addr{}, "udp header: address type 0x00 unknown"},
		{"atyp-2", h("00 00 00 02 00 00 00 00 00 00"), socks5.Addr{}, "udp header: address type 0x02 unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			if tt.wantErr == "" {
				in += payload
			}
			got, n, err := socks5.ParseUDPHeader([]byte(in))
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("error %v, want %q", err, tt.wantErr)
				}
				if got != (socks5.Addr{}) || n != 0 {
					t.Errorf("with an error: addr %+v, n %d; want zero", got, n)
				}
				if (tt.name == "frag-1" || tt.name == "frag-last") != errors.Is(err, socks5.ErrFragmented) {
					t.Errorf("errors.Is(%v, ErrFragmented) is wrong", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseUDPHeader: %v", err)
			}
			if got != tt.want {
				t.Errorf("addr = %+v, want %+v", got, tt.want)
			}
			if n != len(tt.in) || in[n:] != payload {
				t.Errorf("n = %d, payload %q; want %d, %q", n, in[n:], len(tt.in), payload)
			}
		})
	}
}

// TestUDPHeaderRoundTrip checks that what AppendUDPHeader writes parses back
// to the address it was given (an IPv4-mapped address comes back unmapped:
// it goes as ATYP IP V4).
func TestUDPHeaderRoundTrip(t *testing.T) {
	for _, a := range []socks5.Addr{dstIPv4, dstIPv6, dstName, {Name: "a", Port: 0}, {IP: netip.MustParseAddr("::ffff:10.0.0.1"), Port: 65535}} {
		b, err := socks5.AppendUDPHeader(nil, a)
		if err != nil {
			t.Fatalf("AppendUDPHeader(%v): %v", a, err)
		}
		b = append(b, "data"...)
		got, n, err := socks5.ParseUDPHeader(b)
		want := a
		if want.Name == "" {
			want.IP = want.IP.Unmap()
		}
		if err != nil || got != want || string(b[n:]) != "data" {
			t.Errorf("%v: parsed %+v, n %d, %v; want %+v and the payload", a, got, n, err, want)
		}
	}
}
