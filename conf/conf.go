// Package conf turns the router's TOML file into validated plain structs.
//
// Decoding is strict: unknown keys, wrong types, bad addresses, ports, globs, unknown actions
// or proxies are errors, and every error names the file, the line and the key. All errors of
// a file are reported at once (Errors), sorted by line. Whatever the daemon would refuse
// to run is refused here first (check.go), so `router lint` and `router run` agree. Every
// default lives in defaults.go and nowhere else; docs/config.md documents them.
//
// The package reads the file and, unless told not to, the proxy password from its
// environment variable or file; it does nothing else.
package conf

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/agentcage/router/rules"
)

// Config is a validated configuration.
type Config struct {
	File     string
	Proxies  []Proxy // in file order
	Capture  Capture
	Forwards []Forward
	DNS      DNS
	Relay    Relay
	Log      Log
	Control  Control
	Rules    []rules.Rule
	// RuleLines[i] is the line of the [[rule]] header of Rules[i].
	RuleLines []int
}

// Proxy returns the upstream with the given name.
func (c *Config) Proxy(name string) (*Proxy, bool) {
	for i := range c.Proxies {
		if c.Proxies[i].Name == name {
			return &c.Proxies[i], true
		}
	}
	return nil, false
}

// Proxy is one [proxy.NAME] upstream SOCKS5 server.
type Proxy struct {
	Name     string
	Address  string // host:port as written; the host may be a name (resolved without leaking)
	Host     string
	Port     uint16
	Username string
	Password Secret
	// PasswordEnv and PasswordFile say where the password comes from (one of them, when
	// Username is set).
	PasswordEnv  string
	PasswordFile string
	// Pipeline sends the SOCKS5 greeting, credentials, request and the client's first bytes
	// without waiting for each answer (one or two round trips saved per connection). Every
	// server tested (go-socks5, dante) reads its input as a stream; `pipeline = false` is for
	// one that does not. Default true.
	Pipeline bool
	Line     int
}

// Secret holds a password. Every way of printing it prints "[redacted]".
type Secret struct{ s string }

// NewSecret wraps a password.
func NewSecret(s string) Secret { return Secret{s} }

// Reveal returns the password, for the one place that sends it to the proxy.
func (s Secret) Reveal() string { return s.s }

// IsSet reports whether a password is held.
func (s Secret) IsSet() bool { return s.s != "" }

const redacted = "[redacted]"

func (s Secret) String() string               { return redacted }
func (s Secret) GoString() string             { return redacted }
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
func (s Secret) Format(f fmt.State, _ rune)   { f.Write([]byte(redacted)) }
func (s Secret) LogValue() slog.Value         { return slog.StringValue(redacted) }

// Capture says which traffic the router takes.
type Capture struct {
	VMNetworks []netip.Prefix
	Local      bool
	// LocalUDPAllow are UDP ports this host may still send to directly when Local (its other
	// UDP and ICMP are refused: the router cannot proxy them); DHCP always may.
	LocalUDPAllow []uint16
	ListenerPort  uint16
	DNSPort       uint16
	Mark          uint32
	Table         string
}

// Forward is one [[forward]]: the portproxy replacement.
type Forward struct {
	Name    string
	Listen  netip.AddrPort
	Connect netip.AddrPort
	Allow   []netip.Prefix
	// UnsafeAnyAddress allows listening on 0.0.0.0 or ::; lint still reports it.
	UnsafeAnyAddress bool
	Line             int
}

// DNS modes.
const (
	DNSFakeIP = "fake-ip"
	DNSProxy  = "proxy"
)

// DNS is the [dns] table.
type DNS struct {
	Mode        string
	Resolver    string // host:port reached through the proxy
	Proxy       string // the upstream that carries DNS; defaults to the only one
	Pool        netip.Prefix
	TTL         time.Duration
	DirectNames []rules.Host // names resolved directly (HostName or HostSuffix entries)
}

// Relay is the [relay] table.
type Relay struct {
	IdleTimeout    time.Duration
	ConnectTimeout time.Duration
}

// Control is the [control] table: where the daemon answers `router status` and `router
// explain`. Empty Socket means the platform's default (control.DefaultPath).
type Control struct {
	Socket string
}

// Log is the [log] table.
type Log struct {
	Level  string
	Format string
}

// Options changes how Load reads secrets.
type Options struct {
	// SkipSecrets leaves passwords unread (lint and explain need no secret).
	SkipSecrets bool
	// LookupEnv and ReadFile default to os.LookupEnv and os.ReadFile.
	LookupEnv func(string) (string, bool)
	ReadFile  func(string) ([]byte, error)
}

// Load reads and validates the file at path.
func Load(path string, opts Options) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data, opts)
}

// Parse validates data as the contents of the file named name.
func Parse(name string, data []byte, opts Options) (*Config, error) {
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.ReadFile == nil {
		opts.ReadFile = os.ReadFile
	}
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			key := pe.LastKey
			msg := pe.Message
			return nil, Errors{{File: name, Line: pe.Position.Line, Key: key, Msg: "syntax: " + lowerFirst(msg)}}
		}
		return nil, Errors{{File: name, Msg: "syntax: " + err.Error()}}
	}
	d := &decoder{file: name, loc: locate(string(data)), opts: opts}
	cfg := d.config(raw)
	if len(d.errs) > 0 {
		sort.SliceStable(d.errs, func(i, j int) bool { return d.errs[i].Line < d.errs[j].Line })
		return nil, d.errs
	}
	return cfg, nil
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// Error is one problem in a config file.
type Error struct {
	File string
	Line int    // 0 when unknown
	Key  string // the key path, e.g. "rule[3].hosts[2]" or "proxy.exit.password"
	// Where names the key for people, e.g. `rule #3 "model-direct", hosts`.
	Where string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	switch {
	case e.Where != "":
		b.WriteString(e.Where + ": ")
	case e.Key != "":
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a file, sorted by line.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}
