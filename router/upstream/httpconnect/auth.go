package httpconnect

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// redacted stands in for a password wherever an Auth is printed.
const redacted = "[redacted]"

// Auth holds the credentials sent as Proxy-Authorization: Basic (RFC 7617).
// Each is 1 to [MaxCredentialLen] bytes without control bytes, and the
// username has no colon (Basic joins the two with one); [AppendRequest]
// checks that before it writes anything.
//
// The password never leaves through formatting: String, GoString, Format
// (every fmt verb, also through a *Auth inside another struct), LogValue
// (log/slog) and MarshalJSON print "[redacted]" in its place (or "" when it
// is empty). No error of this package contains it, nor its Base64 form.
// Reading the Password field is the only way to get it back.
type Auth struct {
	Username string
	Password string
}

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

// GoString returns `httpconnect.Auth{Username:"name", Password:"[redacted]"}`.
func (a Auth) GoString() string {
	return "httpconnect.Auth{Username:" + strconv.Quote(a.Username) + ", Password:" + strconv.Quote(a.shownPassword()) + "}"
}

// Format implements fmt.Formatter so that no verb prints the password:
// %#v prints GoString, every other verb String.
func (a Auth) Format(f fmt.State, verb rune) {
	s := a.String()
	if verb == 'v' && f.Flag('#') {
		s = a.GoString()
	}
	_, _ = f.Write([]byte(s))
}

// LogValue implements slog.LogValuer: the username and the redacted
// password.
func (a Auth) LogValue() slog.Value {
	return slog.GroupValue(slog.String("username", a.Username), slog.String("password", a.shownPassword()))
}

// MarshalJSON encodes {"username":..., "password":"[redacted]"}.
func (a Auth) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}{a.Username, a.shownPassword()})
}

// check reports why a cannot be sent, by length and kind of byte, never by
// content of the password.
func (a Auth) check() error {
	if n := len(a.Username); n < 1 || n > MaxCredentialLen {
		return fmt.Errorf("username is %d bytes, want 1..%d", n, MaxCredentialLen)
	}
	if n := len(a.Password); n < 1 || n > MaxCredentialLen {
		return fmt.Errorf("password is %d bytes, want 1..%d", n, MaxCredentialLen)
	}
	if strings.IndexByte(a.Username, ':') >= 0 {
		return fmt.Errorf("username %q has a colon, which Basic authentication cannot carry", a.Username)
	}
	if hasCTL(a.Username) {
		return fmt.Errorf("username %q has a control byte", a.Username)
	}
	if hasCTL(a.Password) {
		return fmt.Errorf("password has a control byte")
	}
	return nil
}

func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// token returns the Basic credentials: Base64 of "user:password".
func (a Auth) token() string {
	return base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password))
}
