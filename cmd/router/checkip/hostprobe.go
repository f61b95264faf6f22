package checkip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The host probe (--host-probe): from the guest, a TCP connect to each address of the host
// the guest can see, on the ports people run services on. The cage lets a guest reach the
// host only at the router's forwards and inbounds (and DHCP); anything else that answers is
// a hole: SMB, RDP, a database, a dev server, a local proxy, the router's own listeners.

// DefaultHostPorts returns the TCP ports the host probe tries on every host address: SSH
// (22), SMB (445), a SOCKS proxy (1080), LM Studio (1234), RDP (3389), PostgreSQL (5432),
// Redis (6379), dev servers and HTTP proxies (8080), Ollama (11434), and the router's own
// defaults: metrics (9477), the transparent listener (47100) and DNS (47153).
func DefaultHostPorts() []uint16 {
	return []uint16{22, 445, 1080, 1234, 3389, 5432, 6379, 8080, 9477, 11434, 47100, 47153}
}

// MetadataAddr is a cloud host's instance metadata service (169.254.169.254): the host
// probe tries it on port 80, since a guest that reaches it may read the host's credentials.
var MetadataAddr = netip.AddrFrom4([4]byte{169, 254, 169, 254})

// maxHostDials bounds the host probe's connects in flight.
const maxHostDials = 32

// Target is an address the host probe tries and why: "default gateway", "resolver",
// "first address of 192.168.56.0/24", "--host", "metadata service".
type Target struct {
	Addr netip.Addr // may carry a zone (an IPv6 link-local gateway)
	Why  string
	// Ports, when not nil, replace the probe's ports for this target (the metadata
	// service: 80 only).
	Ports []uint16
}

// Allowed is a host endpoint the guest is meant to reach (a forward or an inbound): an
// address and port, or with an invalid Addr the port on every address.
type Allowed struct {
	Addr netip.Addr
	Port uint16
}

func (a Allowed) String() string {
	if !a.Addr.IsValid() {
		return ":" + strconv.Itoa(int(a.Port))
	}
	return netip.AddrPortFrom(a.Addr, a.Port).String()
}

func (a Allowed) covers(ap netip.AddrPort) bool {
	return a.Port == ap.Port() && (!a.Addr.IsValid() || a.Addr.WithZone("") == ap.Addr().WithZone("").Unmap())
}

// ParseAllowed parses --allow: HOST:PORT with an IP literal, or :PORT.
func ParseAllowed(s string) (Allowed, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Allowed{}, fmt.Errorf("--allow %q: want IP:PORT or :PORT", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return Allowed{}, fmt.Errorf("--allow %q: port %q is not 1-65535", s, port)
	}
	a := Allowed{Port: uint16(n)}
	if host != "" {
		if a.Addr, err = netip.ParseAddr(host); err != nil {
			return Allowed{}, fmt.Errorf("--allow %q: %q is not an IP address", s, host)
		}
		a.Addr = a.Addr.Unmap().WithZone("")
	}
	return a, nil
}

// PortState is what a connect to a host port gave.
type PortState string

// The states.
const (
	PortOpen        PortState = "open"        // the connect succeeded: something listens and the path lets the guest in
	PortRefused     PortState = "refused"     // a reset (nothing listens, or a firewall or the router refused)
	PortNoAnswer    PortState = "no answer"   // nothing came back within the timeout (a silent drop)
	PortUnreachable PortState = "unreachable" // no route, or an ICMP unreachable
)

// PortProbe is one connect of the host probe.
type PortProbe struct {
	Addr    netip.AddrPort
	Why     string // the target's reason
	State   PortState
	Allowed bool // open here is expected: a forward or inbound (--allow, --model)
	Err     string
	Elapsed time.Duration
}

// HostCheck is the outcome of the host probe.
type HostCheck struct {
	Status  Status
	Detail  string
	Targets []Target
	Allowed []Allowed
	Probes  []PortProbe // by target, then port
}

// Open returns the probes that found an open port that is not allowed.
func (h HostCheck) Open() []PortProbe {
	var out []PortProbe
	for _, p := range h.Probes {
		if p.State == PortOpen && !p.Allowed {
			out = append(out, p)
		}
	}
	return out
}

// hostTargets returns the targets: what deps' discovery finds and opts.Hosts, each address
// once (the first reason kept), the guest's own addresses left out
// (discovery gives no loopback address; a --host 127.0.0.1 probes the guest itself).
func (r *runner) hostTargets() ([]Target, []netip.Addr) {
	var found []Target
	var own []netip.Addr
	if r.discover != nil {
		found, own = r.discover()
	}
	for _, h := range r.opts.Hosts {
		found = append(found, Target{Addr: h, Why: "--host"})
	}
	var out []Target
	seen := map[netip.Addr]bool{}
	for _, t := range found {
		k := t.Addr.Unmap()
		if !k.IsValid() || k.IsUnspecified() || k.IsMulticast() || slices.Contains(own, k.WithZone("")) || seen[k] {
			continue
		}
		seen[k] = true
		t.Addr = k
		out = append(out, t)
	}
	return out, own
}

// hostAllowed is opts.Allow and the model server's address (the forward the guest uses):
// an IP literal's address and port, a name's port on every address.
func (r *runner) hostAllowed() []Allowed {
	out := slices.Clone(r.opts.Allow)
	if r.modelURL != "" {
		if u, err := url.Parse(r.modelURL); err == nil {
			port := u.Port()
			if port == "" {
				port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
			}
			if n, err := strconv.Atoi(port); err == nil && n > 0 && n < 65536 {
				a := Allowed{Port: uint16(n)}
				if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
					a.Addr = ip.Unmap().WithZone("")
				}
				out = append(out, a)
			}
		}
	}
	return out
}

// hostProbe runs the probe: every target on every port (and each allowed port, to show it
// answers), at most maxHostDials at once, each connect bounded by the timeout.
func (r *runner) hostProbe(ctx context.Context) HostCheck {
	targets, _ := r.hostTargets()
	allowed := r.hostAllowed()
	hc := HostCheck{Targets: targets, Allowed: allowed}
	ports := r.opts.HostPorts
	if len(ports) == 0 {
		ports = DefaultHostPorts()
	}
	for _, a := range allowed {
		ports = append(ports, a.Port)
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	for _, t := range targets {
		ps := ports
		if t.Ports != nil {
			ps = t.Ports
		}
		for _, p := range ps {
			hc.Probes = append(hc.Probes, PortProbe{Addr: netip.AddrPortFrom(t.Addr, p), Why: t.Why})
		}
	}
	sem := make(chan struct{}, maxHostDials)
	var wg sync.WaitGroup
	for i := range hc.Probes {
		p := &hc.Probes[i]
		p.Allowed = slices.ContainsFunc(allowed, func(a Allowed) bool { return a.covers(p.Addr) })
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				p.State, p.Err = PortNoAnswer, ctx.Err().Error()
				return
			}
			defer func() { <-sem }()
			r.dialHost(ctx, p)
		})
	}
	wg.Wait()
	hc.Status, hc.Detail = judgeHost(hc)
	return hc
}

func (r *runner) dialHost(ctx context.Context, p *PortProbe) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	network := "tcp4"
	if p.Addr.Addr().Is6() {
		network = "tcp6"
	}
	start := time.Now()
	c, err := r.dialer.DialContext(ctx, network, p.Addr.String())
	p.Elapsed = time.Since(start)
	switch {
	case err == nil:
		c.Close()
		p.State = PortOpen
	case isRefused(err):
		p.State = PortRefused
	case isUnreachable(err):
		p.State, p.Err = PortUnreachable, err.Error()
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		p.State = PortNoAnswer
	default:
		p.State, p.Err = PortUnreachable, err.Error()
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func judgeHost(hc HostCheck) (Status, string) {
	if len(hc.Probes) == 0 {
		return Unknown, "no host address to probe"
	}
	addrs := map[netip.Addr]bool{}
	var allowedOpen []string
	for _, p := range hc.Probes {
		addrs[p.Addr.Addr()] = true
		if p.State == PortOpen && p.Allowed {
			allowedOpen = append(allowedOpen, p.Addr.String())
		}
	}
	if open := hc.Open(); len(open) > 0 {
		var list []string
		for _, p := range open {
			list = append(list, p.Addr.String())
		}
		return Fail, fmt.Sprintf("%d of %d host ports on %d addresses are **open** to the guest: %s", len(open), len(hc.Probes), len(addrs), strings.Join(list, ", "))
	}
	d := fmt.Sprintf("none of %d host ports on %d addresses answers", len(hc.Probes), len(addrs))
	if len(allowedOpen) > 0 {
		d += " but the allowed " + strings.Join(allowedOpen, ", ")
	}
	return Pass, d
}

// hostLines are the text report's lines under the host check: per address, the ports by
// state ("**open**" for a finding, "open (allowed)" for a forward or inbound).
func hostLines(hc HostCheck) []string {
	const allowedOpen = "open (allowed)"
	type row struct {
		why    string
		states map[string][]string
	}
	var order []netip.Addr
	rows := map[netip.Addr]*row{}
	for _, p := range hc.Probes {
		a := p.Addr.Addr()
		rw, ok := rows[a]
		if !ok {
			rw = &row{why: p.Why, states: map[string][]string{}}
			rows[a] = rw
			order = append(order, a)
		}
		state := string(p.State)
		switch {
		case p.State == PortOpen && p.Allowed:
			state = allowedOpen
		case p.State == PortOpen:
			state = "**open**"
		}
		rw.states[state] = append(rw.states[state], strconv.Itoa(int(p.Addr.Port())))
	}
	var out []string
	for _, a := range order {
		rw := rows[a]
		var parts []string
		for _, s := range []string{"**open**", allowedOpen, string(PortRefused), string(PortNoAnswer), string(PortUnreachable)} {
			if ps := rw.states[s]; len(ps) > 0 {
				parts = append(parts, s+" "+strings.Join(ps, " "))
			}
		}
		out = append(out, fmt.Sprintf("%s (%s): %s", a, rw.why, strings.Join(parts, "; ")))
	}
	return out
}
