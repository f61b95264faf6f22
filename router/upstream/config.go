package upstream

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/agentcage/router/conf"
)

// Type is the protocol spoken to a proxy, as written in the configuration.
type Type string

// The types of upstream.
const (
	SOCKS5 Type = "socks5" // RFC 1928 over TCP; the default
	SOCKS4 Type = "socks4" // SOCKS4, and SOCKS4a for names; TCP only
	HTTP   Type = "http"   // HTTP CONNECT over TCP
	HTTPS  Type = "https"  // HTTP CONNECT over TLS to the proxy
)

// Config is one upstream, as the configuration gives it. It holds plain
// values only; [Options] holds the collaborators.
type Config struct {
	// Name is the upstream's name ([proxy.NAME]); required.
	Name string
	// Type is the protocol; "" means SOCKS5.
	Type Type
	// Host is the proxy's IP or host name, Port its port; both required.
	// A name is looked up with Options.Resolve.
	Host string
	Port uint16
	// Username and Password are the proxy's credentials (RFC 1929 for
	// SOCKS5, Basic for HTTP); both or neither. Password never appears in
	// an error or a log. For SOCKS4, Username is the user ID and Password
	// stays empty.
	Username string
	Password string
	// Pipeline sends the client's first bytes (and, for SOCKS5, the
	// greeting, credentials and request) in one write without waiting for
	// the proxy's answers, saving round trips. SOCKS5 servers that read
	// their input as a stream (go-socks5) accept it; HTTP proxies may drop
	// bytes that come before their answer, so only turn it on for one that
	// is known to relay them (net/http-based proxies do).
	Pipeline bool
	// Via is the name of the upstream this one is reached through (a chain),
	// given as Options.Via; "" means the proxy is dialed directly.
	Via string
	// RootCAs are the certificate authorities an HTTPS proxy's certificate
	// must chain to; nil means the system's roots. See [LoadCAFile]. Only
	// for HTTPS.
	RootCAs *x509.CertPool
}

// Validate reports what is wrong with c, or nil: the checks that New
// makes, for the configuration to call at load time. No error shows the
// password.
func (c Config) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("name is empty"))
	}
	switch c.Type {
	case "", SOCKS5, SOCKS4, HTTP, HTTPS:
	default:
		errs = append(errs, fmt.Errorf("type %q unknown (want socks5, socks4, http or https)", c.Type))
	}
	if c.Host == "" {
		errs = append(errs, errors.New("host is empty"))
	} else if _, err := netip.ParseAddr(c.Host); err != nil && !validHostName(c.Host) {
		errs = append(errs, fmt.Errorf("host %q is neither an IP nor a host name", c.Host))
	}
	if c.Port == 0 {
		errs = append(errs, errors.New("port is 0"))
	}
	if c.Type == SOCKS4 && c.Password != "" {
		errs = append(errs, errors.New("SOCKS4 has no password, only a user ID (Username)"))
	} else if c.Type != SOCKS4 && (c.Username == "") != (c.Password == "") {
		errs = append(errs, errors.New("username and password go together: give both or neither"))
	}
	if err := conf.CheckCredentials(string(c.Type), c.Username, c.Password); err != nil {
		errs = append(errs, err)
	}
	if c.RootCAs != nil && c.Type != HTTPS {
		errs = append(errs, errors.New("CA roots are for type https only"))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("upstream %q: %w", c.Name, errors.Join(errs...))
}

// validHostName reports whether s can be a DNS name: 1 to 253 bytes of
// letters, digits, '-', '_' and '.'.
func validHostName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Options are an upstream's collaborators.
type Options struct {
	// Dial opens every connection the upstream makes: TCP to the proxy
	// ("tcp", "ip:port") and UDP to a relay ("udp", "ip:port"). It is the
	// router's own dialer (net.Dialer.DialContext with the capture's mark),
	// so capture never takes these back. Required.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Resolve looks up a proxy's host name (and a relay given by name). It
	// must not go through capture. Required when the host is a name.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Log receives debug records (datagrams dropped). nil discards.
	Log *slog.Logger
	// Via, when set, is the upstream every TCP connection to this proxy
	// goes through (a chain, Config.Via): the proxy's host, a name or an
	// IP, is handed to Via's Connect unresolved, so Resolve is not used,
	// and Dial only for UDP, which a chained proxy refuses (Associate
	// fails with ErrUDPUnsupported: its relay would be reached outside the
	// chain). Required when Config.Via is set, and only then.
	Via Upstream
}

// New returns the upstream cfg describes, after [Config.Validate].
func New(cfg Config, opts Options) (Upstream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Dial == nil {
		return nil, fmt.Errorf("upstream %q: Options.Dial is required", cfg.Name)
	}
	switch {
	case cfg.Via != "" && opts.Via == nil:
		return nil, fmt.Errorf("upstream %q: reached through %q, but Options.Via is not given", cfg.Name, cfg.Via)
	case cfg.Via == "" && opts.Via != nil:
		return nil, fmt.Errorf("upstream %q: Options.Via given, but Config.Via is empty", cfg.Name)
	}
	if _, err := netip.ParseAddr(cfg.Host); err != nil && opts.Resolve == nil && opts.Via == nil {
		return nil, fmt.Errorf("upstream %q: Options.Resolve is required for host name %q", cfg.Name, cfg.Host)
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	ep := newEndpoint(cfg.Name, cfg.Host, cfg.Port, opts)
	switch cfg.Type {
	case HTTP, HTTPS:
		return newHTTP(cfg, ep), nil
	case SOCKS4:
		return newSOCKS4(cfg, ep), nil
	default:
		return newSOCKS5(cfg, ep, opts), nil
	}
}

// LoadCAFile reads PEM certificates from path, for Config.RootCAs: the
// proxy's certificate must then chain to one of them (and to nothing
// else). It fails when the file holds no certificate.
func LoadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// ParseAddr parses "host:port" (IPv6 in brackets) into an Addr: an IP goes
// in IP, anything else in Name, to be given to the proxy unresolved. It is
// for addresses in the configuration (a probe's target) and for callers
// that hold a dial address (a resolver reached through the proxy).
func ParseAddr(s string) (Addr, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Addr{}, fmt.Errorf("address %q: %w", s, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return Addr{}, fmt.Errorf("address %q: port %q is not 1 to 65535", s, port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return Addr{IP: ip.Unmap(), Port: uint16(p)}, nil
	}
	if host == "" || !validHostName(host) {
		return Addr{}, fmt.Errorf("address %q: host %q is neither an IP nor a host name", s, host)
	}
	return Addr{Name: host, Port: uint16(p)}, nil
}
