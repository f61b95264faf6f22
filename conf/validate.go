package conf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// The checks here are the one definition of a rule that a package outside conf also
// applies to values given to it in code (dns.New, upstream.Config.Validate): conf refuses a
// file with them, at the file's line and key, and the packages call the same function, so
// that a value conf accepts is never refused at run time, nor the other way round.

// CheckPool refuses a fake-IP pool the allocator cannot use: not IPv4, smaller than a /24,
// or with host bits set. Where a pool may lie (not over local or VM addresses) is checked
// with the rest of the config.
func CheckPool(p netip.Prefix) error {
	switch {
	case !p.Addr().Is4():
		return errors.New("the fake-IP pool must be IPv4")
	case p.Bits() > 24:
		return fmt.Errorf("%s is too small for a fake-IP pool (at least a /24)", p)
	case p.Masked() != p:
		return fmt.Errorf("the fake-IP pool %s has host bits set: write %s", p, p.Masked())
	}
	return nil
}

// MaxCredentialLen is the longest username or password a proxy takes (RFC 1929's one-byte
// lengths; HTTP Basic is held to the same).
const MaxCredentialLen = 255

// CheckTTL refuses a [dns] ttl that is not whole seconds from minTTL to maxTTL.
func CheckTTL(ttl time.Duration) error {
	if ttl < minTTL || ttl > maxTTL || ttl%time.Second != 0 {
		return fmt.Errorf("%v: the TTL of fake answers is whole seconds from %v to %v", ttl, minTTL, maxTTL)
	}
	return nil
}

// CheckResolver refuses a [dns] resolver that is not host:port with a port from 1 to 65535.
func CheckResolver(r string) error {
	host, port, err := net.SplitHostPort(r)
	if n, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || n == 0 {
		return fmt.Errorf("%q is not host:port with a port from 1 to 65535 (e.g. \"1.1.1.1:53\")", r)
	}
	return nil
}

// CheckCredentialLen refuses a username or password (what) longer than MaxCredentialLen.
func CheckCredentialLen(what, s string) error {
	if n := len(s); n > MaxCredentialLen {
		return fmt.Errorf("the %s is %d bytes, longer than %d (RFC 1929)", what, n, MaxCredentialLen)
	}
	return nil
}

// CheckBasicAuth refuses credentials HTTP Basic authentication cannot carry ("user:password"):
// a colon in the username, a control character in either. The errors never contain them.
func CheckBasicAuth(user, pass string) error {
	if strings.ContainsRune(user, ':') {
		return errors.New("an HTTP proxy's username cannot hold a colon (Basic authentication)")
	}
	if strings.ContainsFunc(user+pass, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errors.New("the username or password holds a control character, which HTTP Basic authentication cannot carry")
	}
	return nil
}

// CheckCredentials applies CheckCredentialLen to both and, for ProxyHTTP and ProxyHTTPS,
// CheckBasicAuth.
func CheckCredentials(proxyType, user, pass string) error {
	errs := []error{CheckCredentialLen("username", user), CheckCredentialLen("password", pass)}
	if proxyType == ProxyHTTP || proxyType == ProxyHTTPS {
		errs = append(errs, CheckBasicAuth(user, pass))
	}
	return errors.Join(errs...)
}
