package socks5

import (
	"fmt"

	"github.com/agentcage/router/internal/secret"
)

// Auth holds RFC 1929 username/password credentials. Each is 1 to [MaxCredentialLen]
// bytes; [Client.Handshake] checks that before it sends anything. The password never leaves
// through formatting (package secret); no error of this package contains it.
type Auth = secret.Credentials

// check reports why a cannot be sent, naming lengths only, never the
// password.
func checkAuth(a *Auth) error {
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
