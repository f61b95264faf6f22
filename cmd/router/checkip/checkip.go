// Package checkip proves, from inside a caged guest, that the cage holds: which address the
// outside world sees (IP-echo endpoints over HTTP(S)), that the model endpoint answers and which
// model ids it lists, that DNS does not leave by another path (a "whoami" name whose answer is
// the resolver's egress address), and that UDP and IPv6 do not get out directly. It needs no
// privileges and no config file, and runs on Linux and Windows guests alike.
//
// Run performs the checks concurrently and returns a Report; WriteText and WriteJSON render it;
// Report.ExitCode maps it to the exit codes below. Main is the command line on top of them.
//
// Every network operation goes through the seams in Deps (a Dialer and a Resolver), so tests
// point the checks at loopback servers. Environment proxies (HTTP_PROXY and friends) are never
// used: the checks test what a raw connection from the guest does.
package checkip

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Exit codes of the check-ip command (Report.ExitCode and Main). 0, 1 and 2 are the codes every
// router subcommand shares; 3 is check-ip's own.
const (
	ExitOK       = 0 // every check passed or could not decide
	ExitFail     = 1 // a check failed: exit mismatch, a leak, the model did not answer
	ExitUsage    = 2 // bad arguments
	ExitNoAnswer = 3 // no echo endpoint answered, so the exit address is unknown; nothing else failed
)

// DefaultEcho returns the echo endpoints used when Options.Echo is empty: well-known public
// IP-echo services, all HTTPS and reachable over IPv4 and IPv6, tried in order: ipify (plain
// text), icanhazip (plain text, run by Cloudflare), ifconfig.me (plain text) and Cloudflare's
// trace page (key=value lines, one of them "ip=").
func DefaultEcho() []string {
	return []string{
		"https://api64.ipify.org",
		"https://icanhazip.com",
		"https://ifconfig.me/ip",
		"https://www.cloudflare.com/cdn-cgi/trace",
	}
}

// DefaultSTUN returns the UDP probe's targets used when Options.STUN is empty: public STUN
// servers (RFC 5389) that answer a binding request with the address they saw.
func DefaultSTUN() []string {
	return []string{
		"stun.l.google.com:19302",
		"stun.cloudflare.com:3478",
	}
}

const (
	// DefaultTimeout bounds each network attempt when Options.Timeout is zero.
	DefaultTimeout = 5 * time.Second
	// MaxEchoBody is the most an echo answer may hold; a longer body is an error and nothing
	// past MaxEchoBody+1 bytes is read.
	MaxEchoBody = 64 << 10
	// MaxModelBody bounds a model list the same way (model lists with descriptions are larger
	// than echo answers).
	MaxModelBody = 1 << 20
)

// DefaultIPv6Route returns the destination whose route lookup tells whether the guest has an
// IPv6 route at all, used when Options.IPv6Route is zero: [2001:db8::1]:9, a documentation
// address (RFC 3849). The lookup is a connect(2) on a UDP socket, which sends no packet.
func DefaultIPv6Route() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}), 9)
}

// Options selects the checks and their targets. The zero value checks the exit address through
// DefaultEcho() and probes UDP and IPv6 with the defaults; model and DNS checks run only when
// their field is set.
type Options struct {
	// Echo lists IP-echo URLs, tried in order until one answers with an address. Empty means
	// DefaultEcho(). A URL without a scheme gets "http://".
	Echo []string
	// Expect, when valid, is the address the exit must be (the proxy's exit).
	Expect netip.Addr
	// ExpectNot, when valid, is an address the exit (and the DNS, UDP and IPv6 egress) must not
	// be (the home address).
	ExpectNot netip.Addr
	// Model, when not empty, names an OpenAI-compatible endpoint whose model ids are listed;
	// ModelURL states how it is completed.
	Model string
	// DNSWhoami, when not empty, is a name whose A, AAAA or TXT answer is the address the
	// resolver's queries leave from (e.g. whoami.akamai.net, o-o.myaddr.l.google.com).
	DNSWhoami string
	// STUN lists HOST:PORT targets of the UDP probe; empty means DefaultSTUN().
	STUN []string
	// NoUDP skips the UDP probe.
	NoUDP bool
	// Echo6 lists URLs the IPv6 probe fetches over IPv6 only; empty means the Echo list (or
	// DefaultEcho()).
	Echo6 []string
	// NoIPv6 skips the IPv6 probe.
	NoIPv6 bool
	// IPv6Route is the destination of the IPv6 route lookup; the zero value means
	// DefaultIPv6Route(). No packet is sent to it.
	IPv6Route netip.AddrPort
	// Timeout bounds each network attempt (one HTTP request, one DNS lookup, the wait for UDP
	// replies, one connect of the host probe); zero means DefaultTimeout.
	Timeout time.Duration
	// HostProbe runs the host probe (hostprobe.go): a TCP connect to each host address the
	// guest can see (Deps.HostTargets, Hosts, the metadata service) on HostPorts.
	HostProbe bool
	// Hosts are more addresses for the host probe.
	Hosts []netip.Addr
	// HostPorts are the host probe's ports; empty means DefaultHostPorts().
	HostPorts []uint16
	// Allow are the forwards and inbounds the guest is meant to reach: open there is no
	// finding. The Model server's address is allowed too.
	Allow []Allowed
	// WhyHost and WhyPort, with --why (Main only, never Run): ask the router why a TCP flow
	// of this guest to WhyHost:WhyPort is refused, instead of the checks (why.go).
	WhyHost string
	WhyPort uint16
}

// Dialer opens connections; *net.Dialer satisfies it. The checks dial "tcp", "tcp6", "udp" and
// "udp6".
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Resolver answers the DNS questions of the DNS and UDP checks; *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	LookupTXT(ctx context.Context, name string) ([]string, error)
}

// Deps are the seams Run uses. Every nil field means the system's own: &net.Dialer{},
// net.DefaultResolver, the system's TLS roots, and a discarding logger. HTTP requests resolve
// their host names through the Dialer (a *net.Dialer uses the system resolver).
type Deps struct {
	Dialer   Dialer
	Resolver Resolver
	TLS      *tls.Config // cloned per run; nil means the system roots
	Logger   *slog.Logger
	// HostTargets finds the host probe's addresses and the guest's own (never probed); nil
	// means SystemHostTargets.
	HostTargets func() (targets []Target, own []netip.Addr)
}

// Status is the outcome of one check.
type Status int

const (
	Skipped Status = iota // not asked for
	Pass                  // ✓
	Fail                  // ✗
	Unknown               // ran but could not decide (e.g. nothing to send to)
)

// String returns "skipped", "pass", "fail" or "unknown"; the JSON output uses the same words.
func (s Status) String() string {
	switch s {
	case Skipped:
		return "skipped"
	case Pass:
		return "pass"
	case Fail:
		return "fail"
	case Unknown:
		return "unknown"
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Attempt is one try of an HTTP endpoint.
type Attempt struct {
	URL     string
	Address netip.Addr // the address the endpoint answered; invalid when Err is set
	Err     string     // why the attempt failed; empty on success
	Elapsed time.Duration
}

// ExitCheck is the exit address as the echo endpoints saw it.
type ExitCheck struct {
	Status   Status
	Detail   string     // one human sentence
	Address  netip.Addr // invalid when nothing answered
	URL      string     // the endpoint that answered
	Attempts []Attempt  // in the order tried
}

// ModelCheck is the model endpoint's answer.
type ModelCheck struct {
	Status     Status
	Detail     string
	URL        string   // the URL requested (after ModelURL)
	IDs        []string // model ids, in the server's order
	HTTPStatus int      // 0 when no response came
	Elapsed    time.Duration
	// Management is what one management call got (see ManagementProbe); open fails the
	// check.
	Management Management
}

// DNSCheck is the whoami answer.
type DNSCheck struct {
	Status  Status
	Detail  string
	Name    string
	Answers []netip.Addr // from A/AAAA and from addresses found in TXT strings
	TXT     []string
}

// UDPCheck is the outcome of the STUN probe.
type UDPCheck struct {
	Status  Status
	Detail  string
	Targets []string       // HOST:PORT as given
	From    netip.AddrPort // who replied; invalid when nothing did
	Mapped  netip.AddrPort // the address the STUN server saw; invalid without a STUN answer
}

// IPv6Check is the outcome of the IPv6 probe.
type IPv6Check struct {
	Status   Status
	Detail   string
	Route    bool       // the route lookup found an IPv6 route
	Address  netip.Addr // what an echo endpoint saw over IPv6; invalid when none answered
	URL      string
	Attempts []Attempt
}

// Report holds one result per check. Checks that were not asked for have Status Skipped.
type Report struct {
	Exit  ExitCheck
	Model ModelCheck
	DNS   DNSCheck
	UDP   UDPCheck
	IPv6  IPv6Check
	Host  HostCheck
}

// ExitCode maps the report to the command's exit status: ExitFail when any check failed,
// otherwise ExitNoAnswer when no echo endpoint answered, otherwise ExitOK.
func (r Report) ExitCode() int {
	for _, s := range r.statuses() {
		if s == Fail {
			return ExitFail
		}
	}
	if r.Exit.Status == Unknown {
		return ExitNoAnswer
	}
	return ExitOK
}

func (r Report) statuses() []Status {
	return []Status{r.Exit.Status, r.Model.Status, r.DNS.Status, r.UDP.Status, r.IPv6.Status, r.Host.Status}
}

// Run performs the checks opts selects, concurrently, and returns their report. It returns an
// error only for invalid options (a malformed URL or STUN target); every network failure is a
// finding in the report. Each network attempt is bounded by opts.Timeout; cancelling ctx ends
// the run early, with the unfinished checks failed or undecided.
func Run(ctx context.Context, opts Options, deps Deps) (Report, error) {
	r, err := newRunner(opts, deps)
	if err != nil {
		return Report{}, err
	}
	defer r.close()

	var rep Report
	var wg sync.WaitGroup
	wg.Go(func() { rep.Exit = r.exit(ctx) })
	var whoami dnsAnswer
	if opts.DNSWhoami != "" {
		wg.Go(func() { whoami = r.whoami(ctx) })
	}
	if r.modelURL != "" {
		wg.Go(func() { rep.Model = r.model(ctx) })
	}
	var udp udpOutcome
	if !opts.NoUDP {
		wg.Go(func() { udp = r.udp(ctx) })
	}
	var v6 v6Outcome
	if !opts.NoIPv6 {
		wg.Go(func() { v6 = r.ipv6(ctx) })
	}
	if opts.HostProbe {
		wg.Go(func() { rep.Host = r.hostProbe(ctx) })
	}
	wg.Wait()

	// The DNS, UDP and IPv6 verdicts compare what the outside saw with the exit address, so
	// they are judged after all probes are back. The exit is --expect when given (what the
	// echo saw may itself be the leak), else what the echo saw.
	exit := rep.Exit.Address
	if r.opts.Expect.IsValid() {
		exit = r.opts.Expect
	}
	if opts.DNSWhoami != "" {
		rep.DNS = r.judgeDNS(whoami, exit)
	}
	if !opts.NoUDP {
		rep.UDP = r.judgeUDP(udp, exit)
	}
	if !opts.NoIPv6 {
		rep.IPv6 = r.judgeIPv6(v6, exit)
	}
	return rep, nil
}

// runner holds one run's validated options and the clients built from Deps.
type runner struct {
	opts     Options
	echo     []string
	echo6    []string
	stun     []string
	modelURL string
	timeout  time.Duration
	dialer   Dialer
	resolver Resolver
	log      *slog.Logger
	discover func() ([]Target, []netip.Addr)
	tr       *http.Transport // dual-stack: what an application in the guest gets
	tr6      *http.Transport // IPv6 only
	client   *http.Client
	client6  *http.Client
}

func newRunner(opts Options, deps Deps) (*runner, error) {
	r := &runner{opts: opts, timeout: opts.Timeout, dialer: deps.Dialer, resolver: deps.Resolver, log: deps.Logger, discover: deps.HostTargets}
	if r.discover == nil {
		r.discover = SystemHostTargets
	}
	if r.timeout <= 0 {
		r.timeout = DefaultTimeout
	}
	if r.dialer == nil {
		r.dialer = &net.Dialer{}
	}
	if r.resolver == nil {
		r.resolver = net.DefaultResolver
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.opts.Expect, r.opts.ExpectNot = opts.Expect.Unmap(), opts.ExpectNot.Unmap()
	if r.opts.IPv6Route == (netip.AddrPort{}) {
		r.opts.IPv6Route = DefaultIPv6Route()
	}
	var err error
	if r.echo, err = httpURLs(opts.Echo, DefaultEcho(), "echo"); err != nil {
		return nil, err
	}
	if r.echo6, err = httpURLs(opts.Echo6, r.echo, "echo6"); err != nil {
		return nil, err
	}
	if opts.Model != "" {
		if r.modelURL, err = ModelURL(opts.Model); err != nil {
			return nil, err
		}
	}
	r.stun = opts.STUN
	if len(r.stun) == 0 {
		r.stun = DefaultSTUN()
	}
	for _, t := range r.stun {
		if err := checkHostPort(t); err != nil {
			return nil, fmt.Errorf("stun target %q: %w", t, err)
		}
	}
	r.tr = newTransport(r.dialer, deps.TLS)
	r.tr6 = newTransport(only6{r.dialer}, deps.TLS)
	r.client = &http.Client{Transport: r.tr}
	r.client6 = &http.Client{Transport: r.tr6}
	return r, nil
}

func (r *runner) close() {
	r.tr.CloseIdleConnections()
	r.tr6.CloseIdleConnections()
}

func newTransport(d Dialer, tlsConf *tls.Config) *http.Transport {
	var tc *tls.Config
	if tlsConf != nil {
		tc = tlsConf.Clone()
	}
	return &http.Transport{
		Proxy:                  nil, // never an environment proxy: test the raw path
		DialContext:            d.DialContext,
		TLSClientConfig:        tc,
		ForceAttemptHTTP2:      true,
		DisableKeepAlives:      true, // each endpoint is asked once
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// only6 turns the transport's "tcp" dials into "tcp6": the IPv6 probe must not fall back to
// IPv4.
type only6 struct{ d Dialer }

func (o only6) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4":
		network = "tcp6"
	case "udp", "udp4":
		network = "udp6"
	}
	return o.d.DialContext(ctx, network, address)
}

// httpURLs validates list (or def when list is empty) as http(s) URLs, giving scheme-less ones
// "http://".
func httpURLs(list, def []string, what string) ([]string, error) {
	if len(list) == 0 {
		return def, nil
	}
	out := make([]string, 0, len(list))
	for _, s := range list {
		u, err := parseHTTPURL(s)
		if err != nil {
			return nil, fmt.Errorf("%s url %q: %w", what, s, err)
		}
		out = append(out, u.String())
	}
	return out, nil
}

func parseHTTPURL(s string) (*url.URL, error) {
	if s == "" {
		return nil, errors.New("empty")
	}
	if !hasScheme(s) {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, errors.New("no host")
	}
	return u, nil
}

func hasScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		case i > 0 && c == ':':
			return len(s) >= i+3 && s[i+1:i+3] == "//"
		default:
			return false
		}
	}
	return false
}

func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("split host and port: %w", err)
	}
	if host == "" {
		return errors.New("no host")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not 1-65535", port)
	}
	return nil
}
