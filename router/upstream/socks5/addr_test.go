package socks5_test

import (
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/agentcage/router/router/upstream/socks5"
)

func TestAppendRequest(t *testing.T) {
	tests := []struct {
		name string
		cmd  byte
		dst  socks5.Addr
		want string
	}{
		{"connect-ipv4", socks5.CmdConnect, dstIPv4, reqIPv4},
		{"connect-ipv6", socks5.CmdConnect, dstIPv6, reqIPv6},
		{"connect-name", socks5.CmdConnect, dstName, reqName},
		{"connect-mapped", socks5.CmdConnect, socks5.Addr{IP: netip.MustParseAddr("::ffff:192.0.2.1"), Port: 22}, reqIPv4},
		{"connect-ipv6-zone-dropped", socks5.CmdConnect, socks5.Addr{IP: netip.MustParseAddr("2001:db8::1%eth0"), Port: 443}, reqIPv6},
		{"name-wins", socks5.CmdConnect, socks5.Addr{Name: "example.com", IP: netip.MustParseAddr("192.0.2.1"), Port: 80}, reqName},
		{"udp-associate-zero", socks5.CmdUDPAssociate, socks5.Addr{IP: netip.IPv4Unspecified()}, h("05 03 00 01 00 00 00 00 00 00")},
		{"bind-port-max", socks5.CmdBind, socks5.Addr{Name: "a", Port: 65535}, h("05 02 00 03 01 61 ff ff")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []byte("xyz")
			got, err := socks5.AppendRequest(prefix, tt.cmd, tt.dst)
			if err != nil {
				t.Fatalf("AppendRequest: %v", err)
			}
			if string(got) != "xyz"+tt.want {
				t.Errorf("got\n% x\nwant\n% x", got, "xyz"+tt.want)
			}
		})
	}
}

func TestAppendRequestInvalid(t *testing.T) {
	tests := []struct {
		name string
		dst  socks5.Addr
		want string
	}{
		{"zero", socks5.Addr{}, "invalid destination: address has neither a host name nor an IP"},
		{"name-256", socks5.Addr{Name: strings.Repeat("x", 256)}, "invalid destination: host name is 256 bytes, want 1..255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := []byte("keep")
			got, err := socks5.AppendRequest(buf, socks5.CmdConnect, tt.dst)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
			if string(got) != "keep" {
				t.Errorf("buf = %q after an error, want it unchanged", got)
			}
		})
	}
}

func TestAppendRequestNoAlloc(t *testing.T) {
	buf := make([]byte, 0, socks5.MaxReplyLen)
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = socks5.AppendRequest(buf[:0], socks5.CmdConnect, dstName)
	})
	if allocs != 0 {
		t.Errorf("AppendRequest allocates %v times with room in buf, want 0", allocs)
	}
}

func TestReadReply(t *testing.T) {
	tests := []struct {
		name     string
		in       string // the reply; a banner follows it
		want     socks5.Reply
		wantRep  int    // REP of the wanted *ReplyError, -1 for none
		wantMsg  string // the whole error, "" for none
		wantRead int    // bytes consumed
	}{
		{"ipv4-zero", repZero, socks5.Reply{Bound: socks5.Addr{IP: netip.IPv4Unspecified()}}, -1, "", 10},
		{"ipv4", repIPv4, socks5.Reply{Bound: socks5.Addr{IP: netip.MustParseAddr("203.0.113.5"), Port: 40000}}, -1, "", 10},
		{"ipv6", repIPv6, socks5.Reply{Bound: socks5.Addr{IP: netip.MustParseAddr("2001:db8::2"), Port: 1080}}, -1, "", 22},
		{"ipv6-mapped-kept", h("05 00 00 04 00 00 00 00 00 00 00 00 00 00 ff ff c0 00 02 01 00 50"),
			socks5.Reply{Bound: socks5.Addr{IP: netip.MustParseAddr("::ffff:192.0.2.1"), Port: 80}}, -1, "", 22},
		{"name", repName, socks5.Reply{Bound: socks5.Addr{Name: "proxy.example", Port: 1080}}, -1, "", 20},
		{"name-1", h("05 00 00 03 01 61 00 01"), socks5.Reply{Bound: socks5.Addr{Name: "a", Port: 1}}, -1, "", 8},
		{"refused-with-addr", h("05 05 00 01 00 00 00 00 00 00"),
			socks5.Reply{Code: 5, Bound: socks5.Addr{IP: netip.IPv4Unspecified()}}, 5, "connection refused (reply 0x05)", 10},
		{"not-allowed-name", h("05 02 00 03 01 61 00 00"),
			socks5.Reply{Code: 2, Bound: socks5.Addr{Name: "a"}}, 2, "connection not allowed by ruleset (reply 0x02)", 8},
		{"empty", "", socks5.Reply{}, -1, "read reply: EOF", 0},
		{"version-4", h("04 5a 00 00 00 00 00 00"), socks5.Reply{}, -1, "reply version 0x04, want 0x05", 7},
		{"version-0-short", h("00"), socks5.Reply{}, -1, "reply version 0x00, want 0x05", 1},
		{"head-cut", h("05 00 00 01 7f"), socks5.Reply{}, -1, "read reply: unexpected EOF", 5},
		{"ipv4-cut", h("05 00 00 01 7f 00 00 01 00"), socks5.Reply{}, -1, "read reply: unexpected EOF", 9},
		{"failure-cut", h("05 04 00"), socks5.Reply{Code: 4}, 4, "host unreachable (reply 0x04); read reply: unexpected EOF", 3},
		{"failure-cut-after-head", h("05 04 00 04 00 00 00 00"), socks5.Reply{Code: 4}, 4, "host unreachable (reply 0x04); read reply: unexpected EOF", 8},
		{"atyp-0", h("05 00 00 00 00 00 00"), socks5.Reply{}, -1, "reply address type 0x00 unknown", 7},
		{"empty-name", h("05 00 00 03 00 00 00"), socks5.Reply{}, -1, "reply has an empty host name", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, oneByte := range []bool{false, true} {
				src := strings.NewReader(tt.in)
				var r io.Reader = src
				if oneByte {
					r = iotest.OneByteReader(src)
				}
				if tt.wantMsg == "" {
					// A successful reply is followed by the target's bytes.
					src = strings.NewReader(tt.in + banner)
					r = src
					if oneByte {
						r = iotest.OneByteReader(src)
					}
				}
				got, err := socks5.ReadReply(r)
				if got != tt.want {
					t.Errorf("onebyte=%v: Reply = %+v, want %+v", oneByte, got, tt.want)
				}
				switch {
				case tt.wantMsg == "" && tt.wantRep < 0 && err != nil:
					t.Errorf("onebyte=%v: error %v, want nil", oneByte, err)
				case tt.wantMsg != "" && (err == nil || err.Error() != tt.wantMsg):
					t.Errorf("onebyte=%v: error %v, want %q", oneByte, err, tt.wantMsg)
				}
				var re *socks5.ReplyError
				if gotAs := errors.As(err, &re); gotAs != (tt.wantRep >= 0) || gotAs && re.Code != byte(tt.wantRep) {
					t.Errorf("onebyte=%v: errors.As ReplyError = %v %+v, want code %d", oneByte, gotAs, re, tt.wantRep)
				}
				total := len(tt.in)
				if tt.wantMsg == "" {
					total += len(banner)
				}
				if read := total - src.Len(); read != tt.wantRead {
					t.Errorf("onebyte=%v: read %d bytes, want %d", oneByte, read, tt.wantRead)
				}
			}
		})
	}
}

func TestReplyText(t *testing.T) {
	tests := []struct {
		code byte
		want string
	}{
		{socks5.RepSucceeded, "succeeded"},
		{socks5.RepGeneralFailure, "general SOCKS server failure"},
		{socks5.RepNotAllowed, "connection not allowed by ruleset"},
		{socks5.RepNetworkUnreachable, "network unreachable"},
		{socks5.RepHostUnreachable, "host unreachable"},
		{socks5.RepConnectionRefused, "connection refused"},
		{socks5.RepTTLExpired, "TTL expired"},
		{socks5.RepCommandNotSupported, "command not supported"},
		{socks5.RepAddrTypeNotSupported, "address type not supported"},
		{0x09, "unassigned reply code"},
		{0xff, "unassigned reply code"},
	}
	for _, tt := range tests {
		if got := socks5.ReplyText(tt.code); got != tt.want {
			t.Errorf("ReplyText(0x%02x) = %q, want %q", tt.code, got, tt.want)
		}
	}
}

func TestAddrString(t *testing.T) {
	tests := []struct {
		addr socks5.Addr
		want string
	}{
		{dstIPv4, "192.0.2.1:22"},
		{dstIPv6, "[2001:db8::1]:443"},
		{dstName, "example.com:80"},
		{socks5.Addr{Name: "example.com", IP: netip.MustParseAddr("192.0.2.1"), Port: 80}, "example.com:80"},
		{socks5.Addr{IP: netip.IPv4Unspecified()}, "0.0.0.0:0"},
		{socks5.Addr{IP: netip.MustParseAddr("::ffff:192.0.2.1"), Port: 1}, "[::ffff:192.0.2.1]:1"},
		{socks5.Addr{}, "invalid AddrPort"},
	}
	for _, tt := range tests {
		if got := tt.addr.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.addr, got, tt.want)
		}
	}
}
