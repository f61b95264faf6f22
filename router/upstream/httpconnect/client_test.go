package httpconnect_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentcage/router/router/upstream/httpconnect"
)

// scriptConn is a proxy as a script: it checks that the client writes
// exactly want, and only then releases resp for the client to read. A Read
// before the whole request was written is an error (on a real connection
// both sides would wait for the deadline).
type scriptConn struct {
	want    string
	resp    *strings.Reader
	written []byte
	writes  int
	err     error
}

func newScript(want, resp string) *scriptConn {
	return &scriptConn{want: want, resp: strings.NewReader(resp)}
}

func (s *scriptConn) Write(p []byte) (int, error) {
	s.writes++
	s.written = append(s.written, p...)
	if !strings.HasPrefix(s.want, string(s.written)) {
		s.err = fmt.Errorf("script: client wrote %q, want %q", s.written, s.want)
		return 0, s.err
	}
	return len(p), nil
}

func (s *scriptConn) Read(p []byte) (int, error) {
	if len(s.written) < len(s.want) {
		s.err = errors.New("script: client reads before the request is complete")
		return 0, s.err
	}
	return s.resp.Read(p)
}

const reqName = "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
const reqNameAuth = "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic " + basicAgent + "\r\n\r\n"

func TestHandshakeSuccess(t *testing.T) {
	tests := []struct {
		name string
		auth *httpconnect.Auth
		req  string
		resp string
		code int
	}{
		{"squid", nil, reqName, squid200, 200},
		{"tinyproxy-auth", creds, reqNameAuth, tinyproxy200, 200},
		{"any-2xx", nil, reqName, "HTTP/1.1 299 Fine\r\nContent-Length: 10\r\n\r\n", 299},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := newScript(tt.req, tt.resp+banner)
			c := httpconnect.Client{Auth: tt.auth}
			resp, err := c.Handshake(conn, "example.com", 443)
			if conn.err != nil {
				t.Fatalf("script: %v", conn.err)
			}
			if err != nil {
				t.Fatalf("Handshake: %v", err)
			}
			if resp.StatusCode != tt.code {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.code)
			}
			if conn.writes != 1 {
				t.Errorf("%d writes, want the request in one", conn.writes)
			}
			if rest, _ := io.ReadAll(conn.resp); string(rest) != banner {
				t.Errorf("left unread %q, want the banner", rest)
			}
		})
	}
}

func TestHandshakeFailure(t *testing.T) {
	tests := []struct {
		name     string
		auth     *httpconnect.Auth
		req      string
		resp     string
		wantMsg  string
		wantIs   error
		wantCode int // of a *StatusError, 0 for none
	}{
		{"407-no-credentials", nil, reqName, squid407,
			`http connect: proxy answered 407 "Proxy Authentication Required": proxy requires authentication`, httpconnect.ErrAuthRequired, 407},
		{"407-wrong-credentials", creds, reqNameAuth, squid407,
			`http connect: proxy answered 407 "Proxy Authentication Required": credentials rejected`, httpconnect.ErrAuthFailed, 407},
		{"403", nil, reqName, "HTTP/1.1 403 Forbidden\r\n\r\n", `http connect: proxy answered 403 "Forbidden"`, nil, 403},
		{"502", nil, reqName, "HTTP/1.1 502 Bad Gateway\r\n\r\n", `http connect: proxy answered 502 "Bad Gateway"`, nil, 502},
		{"100", nil, reqName, "HTTP/1.1 100 Continue\r\n\r\n" + squid200, `http connect: proxy answered 100 "Continue"`, nil, 100},
		{"long-reason-cut", nil, reqName, "HTTP/1.1 500 " + strings.Repeat("x", 100) + "\r\n\r\n",
			`http connect: proxy answered 500 "` + strings.Repeat("x", 64) + `..."`, nil, 500},
		{"closed", nil, reqName, "", "http connect: read response: EOF", io.EOF, 0},
		{"garbage", nil, reqName, "\x05\x00", `http connect: read response: "\x05\x00" is not the start of an HTTP response`, nil, 0},
		{"bad-field", nil, reqName, "HTTP/1.1 200 OK\r\nA b\r\n\r\n", "http connect: response: line 2: header line has no colon", nil, 0},
		{"invalid-target", nil, "", "", `http connect: invalid target: port 0`, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := newScript(tt.req, tt.resp)
			c := httpconnect.Client{Auth: tt.auth}
			port := uint16(443)
			if tt.name == "invalid-target" {
				port = 0
			}
			resp, err := c.Handshake(conn, "example.com", port)
			if conn.err != nil {
				t.Fatalf("script: %v", conn.err)
			}
			if err == nil || err.Error() != tt.wantMsg {
				t.Fatalf("error %v, want %q", err, tt.wantMsg)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v, want errors.Is %v", err, tt.wantIs)
			}
			var se *httpconnect.StatusError
			if gotAs := errors.As(err, &se); gotAs != (tt.wantCode != 0) || gotAs && se.Code != tt.wantCode {
				t.Errorf("errors.As StatusError = %v %+v, want code %d", gotAs, se, tt.wantCode)
			}
			if resp.StatusCode != tt.wantCode {
				t.Errorf("Response status %d, want %d", resp.StatusCode, tt.wantCode)
			}
			if tt.name == "invalid-target" && len(conn.written) != 0 {
				t.Errorf("wrote %q for an invalid target, want nothing", conn.written)
			}
		})
	}
}

const secret = "hunter2-Pa55w0rd"

func TestSecretsHidden(t *testing.T) {
	a := &httpconnect.Auth{Username: "agent", Password: secret}
	token := "YWdlbnQ6aHVudGVyMi1QYTU1dzByZA==" // Base64 of agent:hunter2-Pa55w0rd
	req := "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic " + token + "\r\n\r\n"
	// A proxy that echoes what it was sent, in the reason and a field.
	for _, echo := range []string{secret, token, "Basic " + token} {
		resp := "HTTP/1.1 407 bad " + echo + "\r\nX-Echo: " + echo + "\r\n\r\n"
		c := httpconnect.Client{Auth: a}
		got, err := c.Handshake(newScript(req, resp), "example.com", 443)
		if err == nil {
			t.Fatal("Handshake succeeded")
		}
		for _, s := range []string{fmt.Sprintf("%v", err), fmt.Sprintf("%#v", err), fmt.Sprintf("%+v", got)} {
			if strings.Contains(s, secret) || strings.Contains(s, token) {
				t.Errorf("echo %q: %s shows the secret", echo, s)
			}
		}
	}
	wrapped := struct {
		A  httpconnect.Auth
		P  *httpconnect.Auth
		C  httpconnect.Client
		CP *httpconnect.Client
	}{*a, a, httpconnect.Client{Auth: a}, &httpconnect.Client{Auth: a}}
	var shown []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		shown = append(shown, fmt.Sprintf(verb, *a), fmt.Sprintf(verb, a), fmt.Sprintf(verb, wrapped))
	}
	j, err := json.Marshal(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", "auth", a, "client", wrapped.C)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("m", "auth", *a)
	shown = append(shown, string(j), buf.String())
	for _, s := range shown {
		if strings.Contains(s, secret) || strings.Contains(s, token) {
			t.Errorf("%s shows the password", s)
		}
	}
	if got, want := a.String(), `{Username:"agent" Password:"[redacted]"}`; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := fmt.Sprintf("%#v", a), `secret.Credentials{Username:"agent", Password:"[redacted]"}`; got != want {
		t.Errorf("%%#v = %q, want %q", got, want)
	}
}
