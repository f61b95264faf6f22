// Package proxycheck tests each upstream proxy from the host, before a guest relies on it
// (`router check-proxy`): can the proxy be reached, does it take the credentials, which
// address does the internet see through it, does a name resolve through it, and how long a
// connect through it takes. It only reads the config and dials; it never prints a password.
package proxycheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/httpconnect"
	"github.com/agentcage/router/router/upstream/socks5"
)

// Options are what Check needs besides the upstream.
type Options struct {
	// Dial opens the connections to the proxy (the router's own, marked socket on Linux, so
	// that a running router's capture does not take them). Required.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Resolve looks up a proxy given by name; nil: Go's resolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Echo are IP-echo URLs tried in order through the proxy: the first that answers gives
	// the exit address. Required.
	Echo []string
	// Resolver is the DNS server (host:port) asked through the proxy, over TCP, for the echo
	// URL's host name ([dns] resolver). Empty skips the DNS check.
	Resolver string
	// Timeout bounds each check (default 10 s).
	Timeout time.Duration
	// Via is the upstream a chained proxy (cfg.Via) is reached through, built as the router
	// builds it; nil for a proxy dialed directly. The reach step then connects through it.
	Via upstream.Upstream
}

// Step is one check's outcome.
type Step struct {
	Name   string        `json:"name"` // reach, auth, exit, dns
	OK     bool          `json:"ok"`   // false: failed (Skipped steps are OK)
	Skip   bool          `json:"skipped,omitempty"`
	Detail string        `json:"detail"` // what was found, or why it failed
	Took   time.Duration `json:"took_ns"`
}

// Report is the outcome for one upstream.
type Report struct {
	Proxy   string        `json:"proxy"`
	Type    string        `json:"type"`
	Address string        `json:"address"`
	Steps   []Step        `json:"steps"`
	Exit    string        `json:"exit,omitempty"`  // the address the echo saw
	Latency time.Duration `json:"latency_ns"`      // a connect through the proxy to the echo
	Error   string        `json:"error,omitempty"` // the first failure, in words
}

// OK reports whether every step passed.
func (r *Report) OK() bool { return r.Error == "" }

func (r *Report) add(s Step) {
	r.Steps = append(r.Steps, s)
	if !s.OK && r.Error == "" {
		r.Error = s.Name + ": " + s.Detail
	}
}

// Check runs the checks through the upstream cfg describes. Each step runs even when an
// earlier one failed, when it can: a proxy that cannot be reached is not asked anything.
func Check(ctx context.Context, cfg upstream.Config, opts Options) *Report {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Resolve == nil {
		opts.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	typ := string(cfg.Type)
	if typ == "" {
		typ = string(upstream.SOCKS5)
	}
	rep := &Report{Proxy: cfg.Name, Type: typ, Address: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}

	// reach: a plain TCP connection to the proxy.
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	var addr string
	var err error
	if opts.Via != nil {
		addr, err = reachVia(rctx, cfg, opts.Via)
	} else {
		addr, err = reach(rctx, cfg, opts)
	}
	cancel()
	if err != nil {
		rep.add(Step{Name: "reach", Detail: err.Error(), Took: time.Since(start)})
		rep.add(Step{Name: "auth", Skip: true, OK: true, Detail: "not tried: the proxy cannot be reached"})
		return rep
	}
	rep.add(Step{Name: "reach", OK: true, Detail: "connected to " + addr, Took: time.Since(start)})

	up, err := upstream.New(cfg, upstream.Options{Dial: opts.Dial, Resolve: opts.Resolve, Via: opts.Via})
	if err != nil {
		rep.add(Step{Name: "auth", Detail: err.Error()})
		return rep
	}
	echo, err := echoTarget(opts.Echo)
	if err != nil {
		rep.add(Step{Name: "exit", Detail: err.Error()})
		return rep
	}

	// auth and latency: a connect through the proxy to the echo server.
	start = time.Now()
	cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	c, err := up.Connect(cctx, echo.addr, nil)
	cancel()
	rep.Latency = time.Since(start)
	switch {
	case err != nil && authFailure(err):
		rep.add(Step{Name: "auth", Detail: "the proxy refused the credentials: " + err.Error(), Took: rep.Latency})
		return rep
	case err != nil:
		rep.add(Step{Name: "auth", OK: true, Detail: authText(cfg)})
		rep.add(Step{Name: "exit", Detail: "connect through the proxy to " + echo.addr.String() + ": " + err.Error(), Took: rep.Latency})
		return rep
	}
	c.Close()
	rep.add(Step{Name: "auth", OK: true, Detail: authText(cfg), Took: rep.Latency})

	// exit: an HTTP GET of each echo URL through the proxy until one answers.
	start = time.Now()
	exit, via, err := exitAddr(ctx, up, opts)
	if err != nil {
		rep.add(Step{Name: "exit", Detail: err.Error(), Took: time.Since(start)})
	} else {
		rep.Exit = exit
		rep.add(Step{Name: "exit", OK: true, Detail: exit + " (as " + via + " saw it)", Took: time.Since(start)})
	}

	// dns: the echo URL's host name resolved through the proxy.
	if opts.Resolver == "" || echo.name == "" {
		rep.add(Step{Name: "dns", OK: true, Skip: true, Detail: "not tried: no resolver, or the echo URL names no host"})
		return rep
	}
	start = time.Now()
	answer, err := resolve(ctx, up, opts.Resolver, echo.name, opts.Timeout)
	if err != nil {
		rep.add(Step{Name: "dns", Detail: fmt.Sprintf("%s via %s through the proxy: %v", echo.name, opts.Resolver, err), Took: time.Since(start)})
	} else {
		rep.add(Step{Name: "dns", OK: true, Detail: fmt.Sprintf("%s → %s via %s through the proxy", echo.name, answer, opts.Resolver), Took: time.Since(start)})
	}
	return rep
}

// reachVia connects to a chained proxy through the hop before it, giving that hop the
// proxy's host unresolved.
func reachVia(ctx context.Context, cfg upstream.Config, via upstream.Upstream) (string, error) {
	dst, err := upstream.ParseAddr(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		return "", err
	}
	c, err := via.Connect(ctx, dst, nil)
	if err != nil {
		return "", fmt.Errorf("through %s: %w", via.Name(), err)
	}
	c.Close()
	return dst.String() + " through " + via.Name(), nil
}

// reach connects to the proxy itself and says which address answered.
func reach(ctx context.Context, cfg upstream.Config, opts Options) (string, error) {
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(cfg.Host); err == nil {
		addrs = append(addrs, a)
	} else {
		as, err := opts.Resolve(ctx, cfg.Host)
		if err != nil || len(as) == 0 {
			return "", fmt.Errorf("resolve %s: %w", cfg.Host, errors.Join(err, noAddr(len(as))))
		}
		addrs = as
	}
	var err error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, cfg.Port).String()
		var c net.Conn
		if c, err = opts.Dial(ctx, "tcp", ap); err == nil {
			c.Close()
			return ap, nil
		}
	}
	return "", err
}

func noAddr(n int) error {
	if n == 0 {
		return errors.New("no address")
	}
	return nil
}

// authFailure reports whether err is the proxy refusing the credentials (or asking for
// some when none were given).
func authFailure(err error) bool {
	return errors.Is(err, socks5.ErrAuthFailed) || errors.Is(err, socks5.ErrNoAcceptableMethods) ||
		errors.Is(err, httpconnect.ErrAuthFailed) || errors.Is(err, httpconnect.ErrAuthRequired)
}

func authText(cfg upstream.Config) string {
	if cfg.Username == "" {
		return "no credentials needed"
	}
	return "credentials of " + strconv.Quote(cfg.Username) + " accepted"
}

// target is where the echo URL points: the destination to hand the proxy, and the host
// name when it has one.
type target struct {
	addr upstream.Addr
	name string
}

func echoTarget(echo []string) (target, error) {
	if len(echo) == 0 {
		return target{}, errors.New("no echo URL")
	}
	u, err := url.Parse(echo[0])
	if err != nil || u.Host == "" {
		return target{}, fmt.Errorf("echo URL %q: not a URL", echo[0])
	}
	port := u.Port()
	if port == "" {
		port = map[bool]string{true: "443", false: "80"}[u.Scheme == "https"]
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return target{}, fmt.Errorf("echo URL %q: bad port", echo[0])
	}
	t := target{addr: upstream.Addr{Port: uint16(p)}}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		t.addr.IP = a
	} else {
		t.addr.Name, t.name = u.Hostname(), u.Hostname()
	}
	return t, nil
}

// exitAddr fetches the echo URLs through up until one answers with an address.
func exitAddr(ctx context.Context, up upstream.Upstream, opts Options) (exit, via string, err error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, address string) (net.Conn, error) {
			dst, err := upstream.ParseAddr(address)
			if err != nil {
				return nil, err
			}
			return up.Connect(ctx, dst, nil)
		},
		Proxy:             nil,
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: opts.Timeout}
	var errs []error
	for _, u := range opts.Echo {
		req, rerr := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if rerr != nil {
			errs = append(errs, rerr)
			continue
		}
		resp, gerr := client.Do(req)
		if gerr != nil {
			errs = append(errs, gerr)
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		if a, ok := firstAddr(string(body)); ok && resp.StatusCode == http.StatusOK {
			return a.String(), u, nil
		}
		errs = append(errs, fmt.Errorf("%s: status %d, no address in the answer", u, resp.StatusCode))
	}
	return "", "", fmt.Errorf("no echo URL answered through the proxy: %w", errors.Join(errs...))
}

// firstAddr finds the first IP address in an echo answer (plain text or JSON).
func firstAddr(body string) (netip.Addr, bool) {
	f := func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F' || r == '.' || r == ':')
	}
	for _, w := range strings.FieldsFunc(body, f) {
		if a, err := netip.ParseAddr(strings.Trim(w, ":")); err == nil && (a.Is4() || strings.Count(w, ":") >= 2) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// resolve asks resolver (host:port) for name's A records over TCP through up.
func resolve(ctx context.Context, up upstream.Upstream, resolver, name string, timeout time.Duration) (string, error) {
	dst, err := upstream.ParseAddr(resolver)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := up.Connect(ctx, dst, nil)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	m := new(mdns.Msg)
	m.SetQuestion(mdns.Fqdn(name), mdns.TypeA)
	dc := &mdns.Conn{Conn: c} // not a PacketConn: miekg/dns frames the messages for TCP
	if err := dc.WriteMsg(m); err != nil {
		return "", err
	}
	r, err := dc.ReadMsg()
	if err != nil {
		return "", err
	}
	if r.Rcode != mdns.RcodeSuccess {
		return "", fmt.Errorf("answer %s", mdns.RcodeToString[r.Rcode])
	}
	var as []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*mdns.A); ok {
			as = append(as, a.A.String())
		}
	}
	if len(as) == 0 {
		return "", errors.New("no A record")
	}
	return strings.Join(as, ", "), nil
}
