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
//
// # Limits
//
// A config can arrive from anyone who can write the file and send SIGHUP, and the daemon
// loads it while it runs; so loading is bounded in time and memory, linear in the file's
// size. Before the TOML library sees the text, Parse refuses:
//   - a file larger than MaxFileSize (2 MiB): a real config is a few KB, and 10,000 rules
//     take about 1 MB;
//   - a key nested deeper than MaxNesting (8) levels, where each table name, dotted key
//     part, array and inline table is a level: the schema needs 4 at most
//     ("rule[2].hosts[3]"), and deep nesting is what made loading quadratic;
//   - a key path longer than MaxKeyPath (128) bytes, table and key names with their dots:
//     the library spells out every value's full path, so a long table name repeated for
//     each key under it would cost its length times the number of keys.
//
// Each refusal names the file and, for the last two, the line and key. A file that passes
// is decoded as usual; at most MaxErrors problems are reported (the first ones by line),
// with a count of the rest.
package conf

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/agentcage/router/internal/secret"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/modelapi"
)

// Config is a validated configuration.
type Config struct {
	File     string
	Proxies  []Proxy // in file order
	Capture  Capture
	Forwards []Forward
	Inbounds []Inbound
	DNS      DNS
	Relay    Relay
	Log      Log
	Control  Control
	Metrics  Metrics
	Policy   Policy
	Console  Console
	Budget   Budget
	// Credentials are the [[credential]] tables, in file order.
	Credentials []Credential
	Rules       []rules.Rule
	// RuleLines[i] is the line of the [[rule]] header of Rules[i] (in the approved file for
	// the approved rules: see Policy.Approved).
	RuleLines []int
	// ApprovedAt and ApprovedN place the approved rules (the router's own file, read when
	// the config asks) in Rules: Rules[ApprovedAt:ApprovedAt+ApprovedN].
	ApprovedAt, ApprovedN int

	loc *locator // the lines of the file's keys; nil for a Config built in code
}

// Line returns the line where the file writes the key path (as in Error.Key, e.g.
// "capture.vm_networks[2]"), or of the nearest enclosing table; 0 when unknown.
func (c *Config) Line(path string) int {
	if c == nil || c.loc == nil {
		return 0
	}
	return c.loc.line(path)
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

// Proxy types ([proxy.NAME] type).
const (
	ProxySOCKS5 = "socks5" // RFC 1928; the default
	ProxySOCKS4 = "socks4" // SOCKS4, and SOCKS4a for names (TCP only)
	ProxyHTTP   = "http"   // HTTP CONNECT
	ProxyHTTPS  = "https"  // HTTP CONNECT over TLS to the proxy
)

// Proxy is one [proxy.NAME] upstream: a SOCKS5 server or an HTTP(S) CONNECT proxy.
type Proxy struct {
	Name     string
	Type     string // ProxySOCKS5, ProxyHTTP or ProxyHTTPS
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
	// CAFile (https only) names the PEM certificates the proxy's certificate must chain to
	// instead of the system's roots; RootCAs holds them once read.
	CAFile  string
	RootCAs *x509.CertPool
	// HealthCheck is the period of a probe through the proxy to HealthTarget (host:port);
	// zero means no probe (the health comes from the flows' own connects).
	HealthCheck  time.Duration
	HealthTarget string
	// Via names the proxy this one is reached through (a chain: the router connects to Via,
	// asks it for Host:Port, and speaks this proxy's protocol over that tunnel); "" means
	// this proxy is dialed directly. checkChains refuses cycles and chains over MaxChain.
	Via  string
	Line int
}

// MaxChain is the most proxies a chain may hold, the first hop and the last included.
const MaxChain = 8

// CarriesUDP reports whether the proxy can carry UDP (SOCKS5 UDP ASSOCIATE). A chained
// proxy (Via set) carries none: its UDP relay would have to be reached through the hops
// before it, and the router does not nest UDP associations.
func (p *Proxy) CarriesUDP() bool { return p.Type == ProxySOCKS5 && p.Via == "" }

// ProxyNames splits a rule's proxy (one name, or a failover list joined by ",", in order).
func ProxyNames(proxy string) []string {
	if proxy == "" {
		return nil
	}
	return strings.Split(proxy, ",")
}

// Secret holds a password: every way of printing it prints "[redacted]" (package secret).
type Secret = secret.Password

// NewSecret wraps a password.
func NewSecret(s string) Secret { return secret.NewPassword(s) }

// Capture says which traffic the router takes.
type Capture struct {
	// VMNetworks are the VM networks, as written plus the presets' defaults.
	VMNetworks []netip.Prefix
	// VMInterfaces are interface names (a trailing * matches any suffix) whose forwarded
	// traffic is caged whole, any source and either family: as written plus the presets'.
	// The platform adds the interfaces that carry an address inside VMNetworks.
	VMInterfaces []string
	// Hypervisors are the presets named; Presets what each expanded to on this OS, and
	// CagedApps the processes they cage (besides the apps of proxy and block rules).
	Hypervisors []string
	Presets     []Preset
	CagedApps   []rules.App
	// CageSubnets are subnets whose guests have no route out but through the router (a
	// Hyper-V Internal switch without NAT, on Windows): they count as VM networks (and are
	// in VMNetworks), and the Windows guard forbids forwarding anything from them.
	CageSubnets []netip.Prefix
	Local       bool
	// LocalUDPAllow are UDP ports this host may still send to directly when Local (its other
	// UDP and ICMP are refused: the router cannot proxy them); DHCP always may.
	LocalUDPAllow []uint16
	// RivalPermits (Windows) is what the daemon does when another product's sublayer above
	// the guard's holds hard permits at the guard's layers (they defeat its blocks): "warn"
	// (the default, also when empty) or "refuse" to start.
	RivalPermits string
	ListenerPort uint16
	DNSPort      uint16
	// UDPPort is the transparent UDP socket that captured UDP reaches (Linux, TPROXY).
	UDPPort uint16
	Mark    uint32
	Table   string
}

// Forward is one [[forward]]: the portproxy replacement.
type Forward struct {
	Name    string
	Listen  netip.AddrPort
	Connect netip.AddrPort
	Allow   []netip.Prefix
	// API is the model server kinds whose inference calls pass (DefaultForwardAPI when the
	// key is left out); [modelapi.TCP] alone makes the forward a raw pipe.
	API []modelapi.Kind
	// AllowPaths are calls allowed on top of API's lists ("POST /v1/rerank").
	AllowPaths []modelapi.Route
	// MaxBody bounds a request body, in bytes (DefaultMaxBody when left out).
	MaxBody int64
	// IdleTimeout ends a connection idle this long (idle_timeout): between two requests of
	// an HTTP forward (DefaultForwardIdleTimeout when left out), both directions quiet for a
	// raw one (0 when left out: [relay] idle_timeout).
	IdleTimeout time.Duration
	// UnsafeAnyAddress allows listening on 0.0.0.0 or ::; lint still reports it.
	UnsafeAnyAddress bool
	Line             int
}

// Raw reports whether the forward is a raw TCP pipe (api = "tcp").
func (f Forward) Raw() bool { return modelapi.Raw(f.API) }

// Inbound is one [[inbound]]: an explicit proxy (SOCKS5 or HTTP CONNECT) on a VM-facing
// address, for guests that cannot be captured (a Hyper-V internal switch) or are pointed at
// it. Its flows go through the rules like captured ones, with the client as source and the
// name it asked for as host.
type Inbound struct {
	Name   string
	Type   string // "socks5" or "http"
	Listen netip.AddrPort
	Allow  []netip.Prefix
	// UnsafeAnyAddress allows listening on 0.0.0.0 or ::; lint still reports it.
	UnsafeAnyAddress bool
	Line             int
}

// DNS transports through the proxy ([dns] transport).
const (
	DNSOverTCP = "tcp"
	DNSOverUDP = "udp"
)

// DNS modes.
const (
	DNSFakeIP = "fake-ip"
	DNSProxy  = "proxy"
)

// DNS capture scopes ([dns] capture).
const (
	DNSCaptureCaged = "caged" // only the queries of caged processes are answered
	DNSCaptureAll   = "all"   // every captured query is answered
)

// DNS is the [dns] table.
type DNS struct {
	Mode string
	// Capture is whose queries the router answers: DNSCaptureCaged or DNSCaptureAll. The
	// default follows [capture] local: "all" with local = true, "caged" without.
	Capture  string
	Resolver string // host:port reached through the proxy
	Proxy    string // the upstream that carries DNS; defaults to the only one
	Pool     netip.Prefix
	TTL      time.Duration
	// AllowDoH lets caged flows reach the well-known DNS-over-HTTPS endpoints (DoHEndpoints)
	// and DoHHosts; false (the default) refuses them, whatever the rules say.
	AllowDoH bool
	// DoHHosts are more DoH endpoints to refuse (names, *.suffix, addresses), the user's own.
	DoHHosts []rules.Host
	// Transport is how queries reach Resolver through the proxy: DNSOverTCP (default) or
	// DNSOverUDP (SOCKS5 UDP ASSOCIATE; the DNS proxy must be a SOCKS5 one).
	Transport   string
	DirectNames []rules.Host // names resolved directly (HostName or HostSuffix entries)
}

// Relay is the [relay] table.
type Relay struct {
	IdleTimeout    time.Duration
	ConnectTimeout time.Duration
	// Sockmap moves relayed TCP flows' bytes socket to socket in the kernel (an eBPF
	// sockmap) where the kernel allows it (Linux, with CAP_BPF); otherwise, and when
	// false, the router relays them itself.
	Sockmap bool
}

// Control is the [control] table: where the daemon answers `router status` and `router
// explain`. Empty Socket means the platform's default (control.DefaultPath).
type Control struct {
	Socket string
}

// Metrics is the [metrics] table: where the daemon serves Prometheus metrics over HTTP.
// The zero value serves none.
type Metrics struct {
	// Listen is the IP:port of the HTTP server (GET /metrics); invalid (the zero AddrPort)
	// when the key is absent or empty. conf accepts an address other than loopback only
	// with UnsafeListen.
	Listen netip.AddrPort
	// UnsafeListen allows Listen on an address other than loopback (a LAN address, 0.0.0.0).
	// The guard still keeps VM networks off every port of the host but the forwards'.
	UnsafeListen bool
}

// Log is the [log] table.
type Log struct {
	Level  string
	Format string
	// Flows is the file of the flow log for audits (one JSON object per line for each
	// ended flow and each refusal); "" writes none.
	Flows string
}

// Options changes how Load reads secrets and expands presets.
type Options struct {
	// SkipSecrets leaves passwords unread (lint and explain need no secret).
	SkipSecrets bool
	// OS is the operating system presets expand for ("linux", "windows"); empty means the
	// one the router runs on.
	OS string
	// LookupEnv and ReadFile default to os.LookupEnv and os.ReadFile.
	LookupEnv func(string) (string, bool)
	ReadFile  func(string) ([]byte, error)
}

func (o Options) goos() string {
	if o.OS != "" {
		return o.OS
	}
	return runtime.GOOS
}

// Limits of a config file; see the package doc.
const (
	MaxFileSize = 2 << 20
	MaxNesting  = 8
	MaxKeyPath  = 128
	MaxErrors   = 50
)

// Load reads and validates the file at path. It reads no more than MaxFileSize bytes and
// one: a larger file (or an endless one, such as a device) is refused unread.
func Load(path string, opts Options) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, Errors{tooLarge(path, "larger than that")}
	}
	return Parse(path, data, opts)
}

func tooLarge(file, size string) *Error {
	return &Error{File: file, Msg: fmt.Sprintf("the file is %s: a config may be at most %d bytes (2 MiB); a real one is a few KB, and 10,000 rules take about 1 MB", size, MaxFileSize)}
}

// Parse validates data as the contents of the file named name.
func Parse(name string, data []byte, opts Options) (*Config, error) {
	given := opts.ReadFile
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.ReadFile == nil {
		opts.ReadFile = os.ReadFile
	}
	if len(data) > MaxFileSize {
		return nil, Errors{tooLarge(name, fmt.Sprintf("%d bytes", len(data)))}
	}
	src := string(data)
	loc := locate(src)
	if e := loc.over; e != nil {
		e.File = name
		return nil, Errors{e}
	}
	var raw map[string]any
	if _, err := toml.Decode(src, &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, Errors{syntaxError(name, data, loc, pe)}
		}
		return nil, Errors{{File: name, Msg: "syntax: " + err.Error()}}
	}
	d := &decoder{file: name, loc: loc, opts: opts, readFile: given}
	cfg := d.config(raw)
	cfg.loc = loc
	if errs := d.errs.sorted(name); len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// syntaxError places a TOML syntax error for people: on the line of the offending
// character (the library counts a newline that ends a line as the next line's), named
// after the key or table written there rather than the last one the parser finished; and
// when a value that began on an earlier line was never closed (a missing ']' at the end of
// a line), on that line, with the line where the parser noticed.
func syntaxError(file string, data []byte, loc *locator, pe toml.ParseError) *Error {
	line := 1 + bytes.Count(data[:min(max(pe.Position.Start, 0), len(data))], []byte("\n"))
	msg := "syntax: " + lowerFirst(pe.Message)
	key, keyLine := loc.lastAt(line)
	if text := lineText(data, line); strings.HasPrefix(text, "[") && !strings.Contains(text, "]") {
		// A table header left open: name the table being written, not the one before.
		key, keyLine = strings.Trim(text, "[ \t"), line
	}
	if key == "" {
		key = pe.LastKey
	}
	if keyLine > 0 && keyLine < line && unclosed(data, pe) {
		msg += fmt.Sprintf(" (the value of %s that begins on line %d is not closed; the parser noticed on line %d)", key, keyLine, line)
		line = keyLine
	}
	return &Error{File: file, Line: line, Key: key, Msg: msg}
}

// lineText is line n of data (1-based), without its newline and surrounding blanks.
func lineText(data []byte, n int) string {
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(data, '\n')
		if j < 0 {
			return ""
		}
		data = data[j+1:]
	}
	if j := bytes.IndexByte(data, '\n'); j >= 0 {
		data = data[:j]
	}
	return string(bytes.TrimSpace(data))
}

// unclosed reports whether pe is the parser meeting the next line's content while still
// inside a value: a missing array terminator, or a bare word at the start of a line where a
// value was expected.
func unclosed(data []byte, pe toml.ParseError) bool {
	if strings.Contains(pe.Message, "array terminator") {
		return true
	}
	if !strings.HasPrefix(pe.Message, "expected value") {
		return false
	}
	start := min(max(pe.Position.Start, 0), len(data))
	lineStart := bytes.LastIndexByte(data[:start], '\n') + 1
	return len(bytes.Trim(data[lineStart:start], " \t\r[")) == 0
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
