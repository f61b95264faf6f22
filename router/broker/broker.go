// Package broker keeps real credentials out of the guests: a guest holds a placeholder, and
// the router puts the real value where the placeholder stands only in the requests it
// carries itself to the one destination the credential is bound to (a model forward, or a
// plaintext HTTP destination by name and port, which the router reaches at an address it
// resolved and dialed, never one a Host header or a TLS server name chose). Anywhere else a
// placeholder is a canary: something carried it where it should not go, and the flow is
// refused.
//
// The package is pure: it reads header values, names and bytes, and imports nothing of ours
// but the one redaction (package internal/secret). A Broker is immutable and safe for
// concurrent use. Values are held as secret.Password and never printed; a Hit names the
// credential, never its value.
package broker

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/agentcage/router/internal/secret"
)

// Credential is one brokered secret.
type Credential struct {
	Name        string
	Placeholder string // what the guest holds; no placeholder contains another (conf checks)
	Value       secret.Password
	Forward     string         // the forward (by name) whose requests get the value, or ""
	Destination string         // or the HTTP destination "name:port" (lower case, no trailing dot)
	Header      string         // the header (canonical) the value goes in; "": any header
	Guests      []netip.Prefix // the sources it is for; empty: any the forward allows
	// TLSTerminate: the destination speaks HTTPS, which the router terminates; Roots verify
	// the destination (nil: the system's roots). Credentials bound to one destination agree
	// on both (conf checks).
	TLSTerminate bool
	Roots        *x509.CertPool
}

// Broker finds placeholders and puts values in their place. The zero Broker (or nil) holds
// no credential: it finds nothing and changes nothing.
type Broker struct {
	creds []Credential
	lower []string // the placeholders in lower case, for names (DNS, TLS), which fold case
}

// New returns a Broker for cs (copied).
func New(cs []Credential) *Broker {
	b := &Broker{creds: append([]Credential(nil), cs...)}
	for _, c := range b.creds {
		b.lower = append(b.lower, strings.ToLower(c.Placeholder))
	}
	return b
}

// Format prints b as the names of its credentials, for every verb: fmt cannot reach the
// redaction of values held in unexported fields, so b never lets it look inside.
func (b *Broker) Format(f fmt.State, _ rune) {
	var names []string
	if b != nil {
		for _, c := range b.creds {
			names = append(names, c.Name)
		}
	}
	fmt.Fprintf(f, "broker[%s]", strings.Join(names, " "))
}

// Empty reports whether b holds no credential (nothing to look for: callers skip the scan).
func (b *Broker) Empty() bool { return b == nil || len(b.creds) == 0 }

// Hit is a placeholder found where it should not be.
type Hit struct {
	Credential string // the credential's name (never its value)
	Where      string // what carried it: "dns name", "tls server name", "http request", "request header", ...
}

// Find reports the first credential whose placeholder occurs in p, byte for byte (the first
// bytes of a plaintext flow, an HTTP request line or body).
func (b *Broker) Find(p []byte, where string) (Hit, bool) {
	if b.Empty() {
		return Hit{}, false
	}
	for _, c := range b.creds {
		if bytes.Contains(p, []byte(c.Placeholder)) {
			return Hit{Credential: c.Name, Where: where}, true
		}
	}
	return Hit{}, false
}

// FindName reports the first credential whose placeholder occurs in name, whatever the case
// (a DNS name, a TLS server name, a name an inbound's client asked for), also with its dots
// and dashes dropped, as a tunnel that splits it into labels would write it.
func (b *Broker) FindName(name, where string) (Hit, bool) {
	if b.Empty() || name == "" {
		return Hit{}, false
	}
	n := strings.ToLower(name)
	squeezed := squeeze(n)
	for i, p := range b.lower {
		if strings.Contains(n, p) || strings.Contains(squeezed, squeeze(p)) {
			return Hit{Credential: b.creds[i].Name, Where: where}, true
		}
	}
	return Hit{}, false
}

// squeeze drops the characters a name cannot keep or a tunnel splits on: dots, dashes and
// underscores.
func squeeze(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r == '_' {
			return -1
		}
		return r
	}, s)
}

// Inject puts, in the header of a request that src sends to the forward named forward, each
// bound credential's value where its placeholder stands, and returns how many values it put.
// A placeholder of a credential bound to something else, for other guests, or in a header
// other than its own (Credential.Header), is a Hit: h is then left unchanged, and the request
// must be refused. target is the request target (path and query) and its Host, where a
// placeholder is always a Hit (URLs are logged and forwarded).
func (b *Broker) Inject(h http.Header, target, forward string, src netip.Addr) (int, Hit, bool) {
	if b.Empty() {
		return 0, Hit{}, false
	}
	if hit, found := b.Find([]byte(target), "request target"); found {
		return 0, hit, true
	}
	return b.inject(h, src, func(c Credential) bool { return c.Destination == "" && c.Forward == forward }, "")
}

// Binds reports whether some credential is bound to the destination dest ("name:port", the
// name in lower case without a trailing dot): a flow the router dials there is to be read
// as HTTP, request by request (InjectTo), rather than relayed as bytes.
func (b *Broker) Binds(dest string) bool {
	if b.Empty() {
		return false
	}
	for _, c := range b.creds {
		if c.Destination != "" && c.Destination == dest {
			return true
		}
	}
	return false
}

// TLS reports whether the destination dest speaks HTTPS that the router terminates, and the
// roots that verify it (nil: the system's).
func (b *Broker) TLS(dest string) (bool, *x509.CertPool) {
	if b.Empty() {
		return false, nil
	}
	for _, c := range b.creds {
		if c.Destination == dest && c.TLSTerminate {
			return true, c.Roots
		}
	}
	return false, nil
}

// InjectTo is Inject for a request that src sends on a connection the router dialed to the
// destination dest ("name:port" as Binds takes it): host is the request's Host (from its
// Host header, or an absolute-form target) and target its request target. The value goes
// only in a header, its credential's (Credential.Header) or any when that is unset, and
// only when host names dest itself (the name, and the port unless it is the scheme's, 80 or
// 443 when the router terminates TLS for dest, and host gives none): a server that routes by Host (a shared front, a CDN) must never carry the value
// to another site. A placeholder in the target or the host, in a header with host naming
// another destination, or of a credential bound elsewhere or for other guests, is a Hit, and
// h is left unchanged. The body is not read: its bytes go to dest unchanged, placeholder or
// not (a placeholder is worth nothing, and dest is where the value belongs).
func (b *Broker) InjectTo(h http.Header, host, target, dest string, src netip.Addr) (int, Hit, bool) {
	if b.Empty() {
		return 0, Hit{}, false
	}
	if hit, found := b.Find([]byte(target), "request target"); found {
		return 0, hit, true
	}
	if hit, found := b.Find([]byte(host), "Host"); found {
		return 0, hit, true
	}
	defaultPort := "80"
	if terminate, _ := b.TLS(dest); terminate {
		defaultPort = "443"
	}
	if !sameDest(host, dest, defaultPort) {
		return b.inject(h, src, func(Credential) bool { return false }, " (its Host names another destination)")
	}
	return b.inject(h, src, func(c Credential) bool { return c.Destination == dest }, "")
}

// sameDest reports whether a request's Host names dest ("name:port"): the same name, case
// and a trailing dot aside, and the same port, which a Host leaves out when it is the
// scheme's (defaultPort: 80, or 443 when the router terminates TLS for dest).
func sameDest(host, dest, defaultPort string) bool {
	dn, dp, err := net.SplitHostPort(dest)
	if err != nil || host == "" {
		return false
	}
	hn, hp := host, defaultPort
	if n, p, err := net.SplitHostPort(host); err == nil {
		hn, hp = n, p
	}
	return strings.EqualFold(strings.TrimSuffix(hn, "."), dn) && hp == dp
}

// inject puts the values of the credentials bound (bound) in h in place of their
// placeholders, or finds the first placeholder that must not go: of a credential not bound,
// not for src, or in a header other than its own. why is said after the header's name in a
// Hit.
func (b *Broker) inject(h http.Header, src netip.Addr, bound func(Credential) bool, why string) (int, Hit, bool) {
	type place struct {
		key string
		i   int
		val string
	}
	var puts []place
	for key, vs := range h {
		for i, v := range vs {
			nv, changed := v, false
			for _, c := range b.creds {
				if !strings.Contains(nv, c.Placeholder) {
					continue
				}
				if !bound(c) || !forGuest(c, src) || c.Header != "" && c.Header != key {
					return 0, Hit{Credential: c.Name, Where: "request header " + key + why}, true
				}
				nv, changed = strings.ReplaceAll(nv, c.Placeholder, c.Value.Reveal()), true
			}
			if changed {
				puts = append(puts, place{key, i, nv})
			}
		}
	}
	for _, p := range puts {
		h[p.key][p.i] = p.val
	}
	return len(puts), Hit{}, false
}

func forGuest(c Credential, src netip.Addr) bool {
	if len(c.Guests) == 0 {
		return true
	}
	src = src.Unmap()
	for _, p := range c.Guests {
		if p.Contains(src) {
			return true
		}
	}
	return false
}
