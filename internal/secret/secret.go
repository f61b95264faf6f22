// Package secret is the one way a password is held in this program so that it never
// leaves through formatting: Password (a password alone, as the config holds it) and
// Credentials (a username and a password, as a proxy protocol sends them) print Redacted in
// place of the password through String, GoString, every fmt verb (also through a pointer
// inside another struct), log/slog, MarshalText and MarshalJSON. The config, the SOCKS5
// wire package and the HTTP CONNECT wire package all use these types; reading the field (or
// Reveal) is the only way to get a password back.
package secret

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
)

// Redacted stands in for a password wherever one is printed.
const Redacted = "[redacted]"

// Password holds a password; the zero Password holds none.
type Password struct{ s string }

// NewPassword wraps a password.
func NewPassword(s string) Password { return Password{s} }

// Reveal returns the password, for the one place that sends it to the proxy.
func (p Password) Reveal() string { return p.s }

// IsSet reports whether a password is held.
func (p Password) IsSet() bool { return p.s != "" }

func (p Password) String() string               { return Redacted }
func (p Password) GoString() string             { return Redacted }
func (p Password) MarshalText() ([]byte, error) { return []byte(Redacted), nil }
func (p Password) Format(f fmt.State, _ rune)   { _, _ = f.Write([]byte(Redacted)) }
func (p Password) LogValue() slog.Value         { return slog.StringValue(Redacted) }

// Credentials are a username and a password as a proxy protocol sends them (RFC 1929, HTTP
// Basic). The password is printed as Redacted, or "" when it is empty.
type Credentials struct {
	Username string
	Password string
}

func (a Credentials) shownPassword() string {
	if a.Password == "" {
		return ""
	}
	return Redacted
}

// String returns `{Username:"name" Password:"[redacted]"}`.
func (a Credentials) String() string {
	return "{Username:" + strconv.Quote(a.Username) + " Password:" + strconv.Quote(a.shownPassword()) + "}"
}

// GoString returns `secret.Credentials{Username:"name", Password:"[redacted]"}`.
func (a Credentials) GoString() string {
	return "secret.Credentials{Username:" + strconv.Quote(a.Username) + ", Password:" + strconv.Quote(a.shownPassword()) + "}"
}

// Format implements fmt.Formatter so that no verb prints the password: %#v prints
// GoString, every other verb String.
func (a Credentials) Format(f fmt.State, verb rune) {
	s := a.String()
	if verb == 'v' && f.Flag('#') {
		s = a.GoString()
	}
	_, _ = f.Write([]byte(s))
}

// LogValue implements slog.LogValuer: a group of the username and the redacted password.
func (a Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("username", a.Username), slog.String("password", a.shownPassword()))
}

// MarshalJSON encodes {"username":..., "password":"[redacted]"}: Credentials cannot be
// written out with their password.
func (a Credentials) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}{a.Username, a.shownPassword()})
}
