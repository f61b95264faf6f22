package socks4_test

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"

	"github.com/agentcage/router/router/upstream/socks4"
)

func TestAppendRequest(t *testing.T) {
	tests := []struct {
		name, user, host string
		ip               string
		port             uint16
		want             []byte
		err              error
	}{
		{"socks4 ipv4", "agent", "", "192.0.2.7", 443, []byte{4, 1, 1, 187, 192, 0, 2, 7, 'a', 'g', 'e', 'n', 't', 0}, nil},
		{"socks4 mapped", "", "", "::ffff:192.0.2.7", 80, []byte{4, 1, 0, 80, 192, 0, 2, 7, 0}, nil},
		{"socks4a name", "", "example.com", "", 80, append([]byte{4, 1, 0, 80, 0, 0, 0, 1, 0}, "example.com\x00"...), nil},
		{"name wins over ip", "u", "a.test", "192.0.2.7", 80, append([]byte{4, 1, 0, 80, 0, 0, 0, 1, 'u', 0}, "a.test\x00"...), nil},
		{"ipv6 refused", "", "", "2001:db8::1", 80, nil, socks4.ErrIPv6},
		{"nothing", "", "", "", 80, nil, socks4.ErrNoDest},
		{"nul in user", "a\x00b", "", "192.0.2.7", 80, nil, socks4.ErrBadField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ip netip.Addr
			if tt.ip != "" {
				ip = netip.MustParseAddr(tt.ip)
			}
			got, err := socks4.AppendRequest(nil, tt.user, tt.host, ip, tt.port)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err == nil && !bytes.Equal(got, tt.want) {
				t.Errorf("got % x\nwant % x", got, tt.want)
			}
		})
	}
}

func TestReadReply(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		code int // -1: success, 0: malformed, else the ReplyError code
	}{
		{"granted", []byte{0, 90, 0, 0, 0, 0, 0, 0}, -1},
		{"granted vn 4", []byte{4, 90, 1, 2, 3, 4, 5, 6}, -1},
		{"rejected", []byte{0, 91, 0, 0, 0, 0, 0, 0}, 91},
		{"identd", []byte{0, 92, 0, 0, 0, 0, 0, 0}, 92},
		{"socks5 answer", []byte{5, 0, 0, 0, 0, 0, 0, 0}, 0},
		{"short", []byte{0, 90, 0}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			if len(in) == socks4.ReplyLen {
				in = append(in, "banner"...)
			}
			r := bytes.NewReader(in)
			err := socks4.ReadReply(r)
			var re *socks4.ReplyError
			switch {
			case tt.code == -1 && err != nil:
				t.Fatalf("err = %v, want success", err)
			case tt.code > 0 && (!errors.As(err, &re) || int(re.Code) != tt.code):
				t.Fatalf("err = %v, want code %d", err, tt.code)
			case tt.code == 0 && (err == nil || errors.As(err, &re)):
				t.Fatalf("err = %v, want a malformed reply", err)
			}
			if tt.code == -1 {
				rest, _ := io.ReadAll(r)
				if string(rest) != "banner" {
					t.Errorf("read past the reply: left %q", rest)
				}
			}
		})
	}
}

// FuzzReadReply: whatever a server sends, ReadReply reads at most one reply's bytes and
// returns success only for a granted one.
func FuzzReadReply(f *testing.F) {
	f.Add([]byte{0, 90, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 91, 0, 0, 0, 0, 0, 0, 'x'})
	f.Add([]byte{5, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		err := socks4.ReadReply(r)
		if read := len(data) - r.Len(); read > socks4.ReplyLen {
			t.Fatalf("read %d bytes, a reply has %d", read, socks4.ReplyLen)
		}
		if err == nil && (len(data) < socks4.ReplyLen || data[1] != socks4.Granted || data[0] != 0 && data[0] != 4) {
			t.Fatalf("success on % x", data)
		}
	})
}
