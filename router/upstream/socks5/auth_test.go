package socks5_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentcage/router/router/upstream/socks5"
)

const secret = "hunter2-Pa55w0rd"

func TestAuthRedacted(t *testing.T) {
	a := socks5.Auth{Username: "agent", Password: secret}
	pa := &a
	c := socks5.Client{Auth: pa, Pipeline: true}
	wrapped := struct {
		Name string
		Auth socks5.Auth
		Ptr  *socks5.Auth
	}{"exit", a, pa}

	tests := []struct {
		name string
		got  string
		want string // "" when only the absence of the password is checked
	}{
		{"String", a.String(), `{Username:"agent" Password:"[redacted]"}`},
		{"GoString", a.GoString(), `secret.Credentials{Username:"agent", Password:"[redacted]"}`},
		{"%v", fmt.Sprintf("%v", a), `{Username:"agent" Password:"[redacted]"}`},
		{"%+v", fmt.Sprintf("%+v", a), `{Username:"agent" Password:"[redacted]"}`},
		{"%#v", fmt.Sprintf("%#v", a), `secret.Credentials{Username:"agent", Password:"[redacted]"}`},
		{"%s", fmt.Sprintf("%s", a), `{Username:"agent" Password:"[redacted]"}`},
		{"%q", fmt.Sprintf("%q", a), `{Username:"agent" Password:"[redacted]"}`},
		{"%x", fmt.Sprintf("%x", a), `{Username:"agent" Password:"[redacted]"}`},
		{"%d", fmt.Sprintf("%d", a), `{Username:"agent" Password:"[redacted]"}`},
		{"ptr-%v", fmt.Sprintf("%v", pa), `{Username:"agent" Password:"[redacted]"}`},
		{"ptr-%+v", fmt.Sprintf("%+v", pa), `{Username:"agent" Password:"[redacted]"}`},
		{"ptr-%#v", fmt.Sprintf("%#v", pa), `secret.Credentials{Username:"agent", Password:"[redacted]"}`},
		{"client-%v", fmt.Sprintf("%v", c), `{{Username:"agent" Password:"[redacted]"} true}`},
		{"client-%+v", fmt.Sprintf("%+v", c), `{Auth:{Username:"agent" Password:"[redacted]"} Pipeline:true}`},
		{"client-%#v", fmt.Sprintf("%#v", c), ""},
		{"client-ptr-%+v", fmt.Sprintf("%+v", &c), ""},
		{"struct-%+v", fmt.Sprintf("%+v", wrapped), ""},
		{"struct-%#v", fmt.Sprintf("%#v", wrapped), ""},
		{"slice-%v", fmt.Sprintf("%v", []socks5.Auth{a}), ""},
		{"map-%v", fmt.Sprintf("%v", map[string]*socks5.Auth{"exit": pa}), ""},
		{"json", mustJSON(t, a), `{"username":"agent","password":"[redacted]"}`},
		{"json-ptr-in-struct", mustJSON(t, wrapped), ""},
		{"slog-text", logged(slog.NewTextHandler, "proxy", a), ""},
		{"slog-json", logged(slog.NewJSONHandler, "proxy", a), ""},
		{"slog-text-ptr", logged(slog.NewTextHandler, "proxy", pa), ""},
		{"slog-json-client", logged(slog.NewJSONHandler, "client", c), ""},
		{"slog-text-client", logged(slog.NewTextHandler, "client", c), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Contains(tt.got, secret) {
				t.Fatalf("%q contains the password", tt.got)
			}
			if tt.want != "" && tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
			if !strings.Contains(tt.got, "agent") && !strings.Contains(tt.got, "0x") {
				t.Errorf("%q shows neither the username nor a pointer", tt.got)
			}
		})
	}
}

func TestAuthEmptyPasswordShown(t *testing.T) {
	a := socks5.Auth{Username: "agent"}
	if got, want := a.String(), `{Username:"agent" Password:""}`; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	var nilAuth *socks5.Auth
	if got, want := fmt.Sprintf("%v", nilAuth), "<nil>"; got != want {
		t.Errorf("nil *Auth prints %q, want %q", got, want)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	return string(b)
}

func logged[H slog.Handler](newHandler func(w io.Writer, o *slog.HandlerOptions) H, key string, v any) string {
	var buf bytes.Buffer
	slog.New(newHandler(&buf, nil)).Info("msg", key, v)
	return buf.String()
}

// TestAuthErrorsHidePassword runs every way the handshake can fail after
// credentials are configured and checks that no error shows the password,
// in any format.
func TestAuthErrorsHidePassword(t *testing.T) {
	auth := &socks5.Auth{Username: "agent", Password: secret}
	up := h("01 05") + "agent" + string([]byte{byte(len(secret))}) + secret
	client := []string{greetUserPass, up, reqIPv4}
	servers := map[string][]string{
		"rejected":        {selUserPass, h("01 01")},
		"no-acceptable":   {h("05 ff")},
		"auth-version":    {selUserPass, h("05 01")},
		"auth-cut":        {selUserPass, h("01")},
		"refused":         {selUserPass, authOK, h("05 05 00 01 00 00 00 00 00 00")},
		"reply-cut":       {selUserPass, authOK, h("05 00 00")},
		"unoffered":       {selNoAuth},
		"greeting-cut":    {},
		"reply-bad-atyp":  {selUserPass, authOK, h("05 00 00 07 00 00 00")},
		"greeting-socks4": {h("00 5b")},
	}
	for name, server := range servers {
		t.Run(name, func(t *testing.T) {
			for _, pipeline := range []bool{false, true} {
				conn, _ := conversation(pipeline, client, server, "", max(len(server), 1))
				c := socks5.Client{Auth: auth, Pipeline: pipeline}
				_, err := c.Handshake(conn, dstIPv4)
				if err == nil {
					t.Fatalf("pipeline=%v: Handshake succeeded, want an error", pipeline)
				}
				for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
					if s := fmt.Sprintf(verb, err); strings.Contains(s, secret) {
						t.Errorf("pipeline=%v: error formatted with %s contains the password: %s", pipeline, verb, s)
					}
				}
				for e := err; e != nil; e = errors.Unwrap(e) {
					if strings.Contains(e.Error(), secret) {
						t.Errorf("pipeline=%v: wrapped error contains the password: %v", pipeline, e)
					}
				}
			}
		})
	}
	// Invalid credentials are reported by length, never by content.
	bad := &socks5.Auth{Username: "agent", Password: secret + strings.Repeat("!", 255)}
	c := socks5.Client{Auth: bad}
	_, err := c.Handshake(newScript(true), dstIPv4)
	if err == nil || strings.Contains(fmt.Sprintf("%#v", err), secret) {
		t.Errorf("invalid password: error %v, want one without the password", err)
	}
}
