package httpconnect_test

import (
	"strings"
	"testing"

	"github.com/agentcage/router/router/upstream/httpconnect"
)

var creds = &httpconnect.Auth{Username: "agent", Password: "s3cret"}

// basicAgent is Base64 of "agent:s3cret".
const basicAgent = "YWdlbnQ6czNjcmV0"

func TestAppendRequest(t *testing.T) {
	tests := []struct {
		name string
		host string
		port uint16
		auth *httpconnect.Auth
		want string
	}{
		{"ipv4", "192.0.2.1", 22, nil, "CONNECT 192.0.2.1:22 HTTP/1.1\r\nHost: 192.0.2.1:22\r\n\r\n"},
		{"ipv6", "2001:db8::1", 443, nil, "CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n"},
		{"ipv6-zone-dropped", "fe80::1%eth0", 443, nil, "CONNECT [fe80::1]:443 HTTP/1.1\r\nHost: [fe80::1]:443\r\n\r\n"},
		{"ipv4-mapped", "::ffff:192.0.2.1", 80, nil, "CONNECT 192.0.2.1:80 HTTP/1.1\r\nHost: 192.0.2.1:80\r\n\r\n"},
		{"name", "example.com", 443, nil, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"},
		{"name-odd-but-fine", "_dmarc.Ex-ample.COM.", 65535, nil, "CONNECT _dmarc.Ex-ample.COM.:65535 HTTP/1.1\r\nHost: _dmarc.Ex-ample.COM.:65535\r\n\r\n"},
		{"auth", "example.com", 443, creds,
			"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic " + basicAgent + "\r\n\r\n"},
		{"auth-utf8-password", "example.com", 443, &httpconnect.Auth{Username: "u", Password: "pässword"},
			"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic dTpww6Rzc3dvcmQ=\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := httpconnect.AppendRequest([]byte("xyz"), tt.host, tt.port, tt.auth)
			if err != nil {
				t.Fatalf("AppendRequest: %v", err)
			}
			if string(got) != "xyz"+tt.want {
				t.Errorf("got\n%q\nwant\n%q", got, "xyz"+tt.want)
			}
		})
	}
}

func TestAppendRequestInvalid(t *testing.T) {
	tests := []struct {
		name string
		host string
		port uint16
		auth *httpconnect.Auth
		want string
	}{
		{"port-0", "example.com", 0, nil, "invalid target: port 0"},
		{"empty-host", "", 80, nil, "invalid target: host name is 0 bytes, want 1..255"},
		{"long-host", strings.Repeat("a", 256), 80, nil, "invalid target: host name is 256 bytes, want 1..255"},
		{"crlf-injection", "example.com\r\nX-Evil: 1", 80, nil, `invalid target: host name "example.com\r\nX-Evil: 1" has byte 0x0d, which a CONNECT target cannot carry`},
		{"space", "example.com HTTP/1.0", 80, nil, `invalid target: host name "example.com HTTP/1.0" has byte 0x20, which a CONNECT target cannot carry`},
		{"userinfo", "user@example.com", 80, nil, `invalid target: host name "user@example.com" has byte 0x40, which a CONNECT target cannot carry`},
		{"port-in-host", "example.com:81", 80, nil, `invalid target: host name "example.com:81" has byte 0x3a, which a CONNECT target cannot carry`},
		{"nul", "a\x00b", 80, nil, `invalid target: host name "a\x00b" has byte 0x00, which a CONNECT target cannot carry`},
		{"user-colon", "example.com", 80, &httpconnect.Auth{Username: "a:b", Password: "pw"}, `invalid credentials: username "a:b" has a colon, which Basic authentication cannot carry`},
		{"user-empty", "example.com", 80, &httpconnect.Auth{Password: "pw"}, "invalid credentials: username is 0 bytes, want 1..255"},
		{"password-empty", "example.com", 80, &httpconnect.Auth{Username: "u"}, "invalid credentials: password is 0 bytes, want 1..255"},
		{"password-long", "example.com", 80, &httpconnect.Auth{Username: "u", Password: strings.Repeat("p", 256)}, "invalid credentials: password is 256 bytes, want 1..255"},
		{"password-ctl", "example.com", 80, &httpconnect.Auth{Username: "u", Password: "pw\nsecret"}, "invalid credentials: password has a control byte"},
		{"user-ctl", "example.com", 80, &httpconnect.Auth{Username: "u\x7f", Password: "pw"}, `invalid credentials: username "u\x7f" has a control byte`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := httpconnect.AppendRequest([]byte("keep"), tt.host, tt.port, tt.auth)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
			if string(got) != "keep" {
				t.Errorf("buf = %q after an error, want it unchanged", got)
			}
			if tt.auth != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}
