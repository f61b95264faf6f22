package socks5

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
)

// redacted stands in for a password wherever an Auth is printed.
const redacted = "[redacted]"

// Auth holds RFC 1929 username/password credentials. Each is 1 to
// [MaxCredentialLen] bytes; [Client.Handshake] checks that before it sends
// anything.
//
// The password never leaves through formatting: String, GoString, Format
// (every fmt verb, also through a *Auth inside another struct), LogValue
// (log/slog) and MarshalJSON all print "[redacted]" in its place (or "" when
// it is empty). No error of this package contains it. Reading the Password
// field directly is the only way to get it back.
type Auth struct {
	Username string
	Password string
}

// shownPassword is what printing shows for the password.
func (a Auth) shownPassword() string {
	if a.Password == "" {
		return ""
	}
	return redacted
}

// String returns `{Username:"name" Password:"[redacted]"}`.
func (a Auth) String() string {
	return "{Username:" + strconv.Quote(a.Username) + " Password:" + strconv.Quote(a.shownPassword()) + "}"
}

// GoString returns `socks5.Auth{Username:"name", Password:"[redacted]"}`
// for %#v.
func (a Auth) GoString() string {
	return "socks5.Auth{Username:" + strconv.Quote(a.Username) + ", Password:" + strconv.Quote(a.shownPassword()) + "}"
}

// Format implements fmt.Formatter so that no verb prints the password:
// %#v prints GoString, every other verb prints String.
func (a Auth) Format(f fmt.State, verb rune) {
	s := a.String()
	if verb == 'v' && f.Flag('#') {
		s = a.GoString()
	}
	_, _ = f.Write([]byte(s))
}

// LogValue implements slog.LogValuer: a group of the username and the
// redacted password.
func (a Auth) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("username", a.Username),
		slog.String("password", a.shownPassword()),
	)
}

// MarshalJSON encodes {"username":..., "password":"[redacted]"}: an Auth
// cannot be written out with its password, only read from configuration by
// other means.
func (a Auth) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}{a.Username, a.shownPassword()})
}

// check reports why a cannot be sent, naming lengths only, never the
// password.
func (a Auth) check() error {
	if n := len(a.Username); n < 1 || n > MaxCredentialLen {
		return fmt.Errorf("username is %d bytes, want 1..%d", n, MaxCredentialLen)
	}
	if n := len(a.Password); n < 1 || n > MaxCredentialLen {
		return fmt.Errorf("password is %d bytes, want 1..%d", n, MaxCredentialLen)
	}
	return nil
}

// appendUserPass appends the RFC 1929 §2 request: VER X'01', ULEN, UNAME,
// PLEN, PASSWD. a must have passed check.
func appendUserPass(buf []byte, a *Auth) []byte {
	buf = append(buf, UserPassVersion, byte(len(a.Username)))
	buf = append(buf, a.Username...)
	buf = append(buf, byte(len(a.Password)))
	return append(buf, a.Password...)
}
