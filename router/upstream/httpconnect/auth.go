package httpconnect

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/agentcage/router/internal/secret"
)

// redacted stands in for a password (and its Base64 form) in what this package reports.
const redacted = secret.Redacted

// Auth holds the credentials sent as Proxy-Authorization: Basic (RFC 7617). Each is 1 to
// [MaxCredentialLen] bytes without control bytes, and the username has no colon (Basic
// joins the two with one); [AppendRequest] checks that before it writes anything. The
// password never leaves through formatting (package secret); no error of this package
// contains it, nor its Base64 form.
type Auth = secret.Credentials

// check reports why a cannot be sent, by length and kind of byte, never by
// content of the password.
func checkAuth(a Auth) error {
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
func token(a Auth) string {
	return base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password))
}
