package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// An inbound ([[inbound]]) is an explicit proxy on a VM-facing address, for guests that are
// pointed at it rather than captured (a Hyper-V internal switch has no process on the host to
// capture). It speaks SOCKS5 (CONNECT; server side of github.com/things-go/go-socks5) or HTTP
// CONNECT, takes connections from its Allow sources only, and sets up each requested
// tunnel as a flow of the router (flow.go): the same rules, upstreams, logs and status as a
// captured flow, with
//
//   - the client's address as the source; the client is caged (policy.Flow.FromVM), this
//     machine's own processes too: an inbound serves guests. A connection the router itself
//     opened to the inbound, carrying a guest's flow (a chain of inbounds), keeps that
//     guest's identity: its source, caged as it was, and the allow list judges it
//     (flow_carried.go);
//   - the name it asked for as the host, never resolved here (a proxy gets it as a name; a
//     direct verdict resolves it through the proxy, like a fake IP), and the address it asked
//     for, when it asked for one, as the destination. localhost and *.localhost are the
//     loopback address, as the router's DNS server answers them; a name that resolvers would
//     read as an address ("127.1", "0x7f.1") or one under .invalid is refused;
//   - a refusal told in the inbound's protocol: SOCKS5 reply X'02' (not allowed by the
//     ruleset) or HTTP 403 for a verdict that refuses the flow (port 53 included: DNS is the
//     DNS server's), X'01', X'03'..X'05' or HTTP 502/504 when connecting failed. Nothing is
//     ever sent direct because a proxy failed.
//
// What an inbound does not do: SOCKS5 BIND and UDP ASSOCIATE (answered "command not
// supported"), SOCKS5 authentication (the allow list is the gate), HTTP requests other than
// CONNECT (plain-HTTP proxying; answered 405 with Allow: CONNECT; curl sends CONNECT for
// http:// URLs too with --proxytunnel).
//
// Bounds: the inbounds hold their share of the descriptor budget (admission: a 32nd of
// the limit, two descriptors a connection, inboundTotal connections at most) at once, in
// handshake or relayed, shared fairly between guests (inboundGuest), and each client
// address inboundPerSource inside its guest's share; more are reset at accept. A client has
// inboundHandshake to send its whole request; an HTTP request head is at most
// inboundHeadMax bytes (431 beyond). Closing the listener stops accepting; tunnels already
// open go on, requests still being read are cut when ctx ends.

// InboundType is the protocol an inbound speaks.
type InboundType string

// Inbound protocols.
const (
	InboundSOCKS5 InboundType = "socks5"
	InboundHTTP   InboundType = "http"
)

// Inbound is one [[inbound]]: an explicit proxy listening on Listen for the Allow sources.
type Inbound struct {
	Name   string
	Type   InboundType
	Listen netip.AddrPort
	Allow  []netip.Prefix
}

func (in *Inbound) allowed(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, p := range in.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Limits of an inbound; see the comment at the top of the file.
const (
	inboundPerSource = 512
	inboundTotal     = 4096
	inboundHandshake = 10 * time.Second
	inboundHeadMax   = 16 << 10
)

// ListenInbound opens the inbound's listening socket (on its address only).
func (r *Router) ListenInbound(ctx context.Context, in Inbound) (*net.TCPListener, error) {
	lc := net.ListenConfig{Control: r.opts.Control}
	ln, err := lc.Listen(ctx, "tcp", in.Listen.String())
	if err != nil {
		return nil, fmt.Errorf("inbound %s: listen %s: %w", in.Name, in.Listen, err)
	}
	return ln.(*net.TCPListener), nil
}

// ServeInbound accepts on ln until ctx is done or ln is closed; each connection is served with
// the settings current() returns when it is accepted, so a reload swaps an inbound's allow
// list, type or name without closing its socket. current must be safe for concurrent use and
// never return nil, and what it returns must not be modified. A source outside Allow, or one
// over its share, is reset at once. Requests still being read end with ctx; tunnels opened go
// on (Wait waits for them).
func (r *Router) ServeInbound(ctx context.Context, ln *net.TCPListener, current func() *Inbound) error {
	s := &inboundServer{r: r, ctx: ctx, adm: r.adm.inbounds}
	s.socks = r.newSOCKSServer()
	return r.acceptLoop(ctx, ln, "inbound "+current().Name+": accept", func(c *net.TCPConn) {
		in := current()
		src := netaddr.AddrPort(c.RemoteAddr())
		a := src.Addr().WithZone("")
		// A client of this machine may be the router carrying a guest's flow: that guest is
		// judged, once its identity is taken (serve).
		local := r.pol.Load().Decision.Local(a)
		if !local && !s.allowed(in, c, src, a) {
			return
		}
		guest := inboundGuest(a, r.pol.Load().Decision.VMNetworks(), in.Allow)
		if !s.adm.take(guest, a) {
			r.book.Add(refusal.Limit, refusal.Event{Src: src, Dst: in.Listen, Rule: "inbound " + in.Name})
			s.refusedOverLimit(in, src)
			reset(c)
			return
		}
		r.flows.Add(1)
		go func() {
			id := identity{src: a, fromVM: true}
			if local {
				if carried, ok := r.carried.take(src); ok {
					id = carried
				}
				if !s.allowed(in, c, src, id.src) {
					s.adm.give(guest, a)
					r.flows.Done()
					return
				}
			}
			s.serve(c, in, id, func() { s.adm.give(guest, a) })
		}()
	})
}

// allowed reports whether in allows the client a (the connection's source src, or the
// client the router carries there); it resets c and counts the refusal when it does not.
func (s *inboundServer) allowed(in *Inbound, c *net.TCPConn, src netip.AddrPort, a netip.Addr) bool {
	if in.allowed(a) {
		return true
	}
	r := s.r
	r.book.Add(refusal.ForwardSource, refusal.Event{Src: netip.AddrPortFrom(a, src.Port()), Dst: in.Listen, Rule: "inbound " + in.Name})
	if r.refuse.note("inbound "+in.Name+": source not allowed", a.String()) {
		r.log.Warn("inbound refused: source not allowed", "inbound", in.Name, "src", src, "client", a)
	}
	reset(c)
	return false
}

// inboundServer is one inbound listener's serving state.
type inboundServer struct {
	r     *Router
	ctx   context.Context
	socks socksServer
	adm   *inboundAdmission
	// lastLimitLog is when a refusal over the limits was last logged (unix nanoseconds):
	// one record a second at most, so a flood cannot flood the log too.
	lastLimitLog atomic.Int64
	overLimit    atomic.Uint64 // refusals over the limits since the last record
}

func (s *inboundServer) refusedOverLimit(in *Inbound, src netip.AddrPort) {
	s.overLimit.Add(1)
	now := time.Now().UnixNano()
	last := s.lastLimitLog.Load()
	if now-last < int64(time.Second) || !s.lastLimitLog.CompareAndSwap(last, now) {
		return
	}
	n := s.overLimit.Swap(0)
	s.r.log.Warn("inbound refused: too many connections", "inbound", in.Name, "src", src,
		"per_source", s.adm.perSource, "budget", s.adm.guests.capacity, "refused", n)
}

// inboundConn is an inbound client's connection while its request is read. Once a flow takes
// it (taken), the flow owns it: Close does nothing then, so that the request reader's own
// deferred Close (go-socks5's ServeConn) leaves the relayed connection alone. Fields other
// than TCPConn are written before the request is read and only read afterwards, all on the
// connection's serving goroutine.
type inboundConn struct {
	*net.TCPConn
	s     *inboundServer
	in    *Inbound
	id    identity    // the client: caged as a guest, or the flow the router carries here
	slot  func()      // gives the connection's admission back
	stop  func() bool // stops the cut at ctx's end (context.AfterFunc's stop)
	taken bool
}

// Close closes the connection unless a flow took it.
func (c *inboundConn) Close() error {
	if c.taken {
		return nil
	}
	return c.TCPConn.Close()
}

// serve reads c's request in the inbound's protocol and sets up the flow it asks for. It
// marks the connection done (r.flows) and gives slot back when no flow took it; a flow does
// both when it ends.
func (s *inboundServer) serve(c *net.TCPConn, in *Inbound, id identity, slot func()) {
	c.SetDeadline(time.Now().Add(inboundHandshake))
	ic := &inboundConn{TCPConn: c, s: s, in: in, id: id, slot: slot}
	ic.stop = context.AfterFunc(s.ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	var err error
	switch in.Type {
	case InboundHTTP:
		err = s.serveHTTP(ic)
	default:
		err = s.socks.ServeConn(ic)
	}
	if ic.taken {
		return
	}
	ic.stop()
	c.Close()
	slot()
	s.r.flows.Done()
	if err != nil && s.ctx.Err() == nil {
		s.r.malformed(in, netaddr.AddrPort(c.RemoteAddr()), err)
	}
}

// malformed counts a request of an inbound's client that set up no flow (malformed, cut
// short, or asking for what an inbound does not serve: BIND, UDP ASSOCIATE, a method other
// than CONNECT, a name resolvers would read as an address) as inbound-malformed, and logs it:
// the first few of each inbound in an interval one by one, the rest in the refusal summary.
func (r *Router) malformed(in *Inbound, src netip.AddrPort, err error) {
	r.book.Add(refusal.Malformed, refusal.Event{Src: src, Dst: in.Listen, Rule: "inbound " + in.Name})
	if r.refuse.note("inbound "+in.Name+": malformed request", src.Addr().String()) {
		r.log.Info("inbound request refused: malformed", "inbound", in.Name, "src", src, "err", err)
	}
}

// inboundRequest is what an inbound's client asked for.
type inboundRequest struct {
	// name is the host name asked for, normalized (lower case, no trailing dot); "" when the
	// client asked for an address.
	name string
	// dst is the address asked for and the port. Its address is invalid when the client
	// asked for a name, except localhost (the loopback address).
	dst netip.AddrPort
	// early are the bytes the client sent after its request, read along with it (at most
	// earlyMax): they go first to the destination.
	early []byte
}

// inboundReply tells an inbound's client how its request ended, in the inbound's protocol.
type inboundReply interface {
	// ok says the tunnel is open.
	ok() error
	// fail says the rules refuse the flow (err nil) or connecting failed (err).
	fail(err error)
	// refused says the rules refuse the flow f, decided d (refusalBody: what and why, where
	// the protocol can say it).
	refused(f *FlowRecord, d policy.Decision)
}

// flow sets up the flow the client of c asked for (flow.go) and answers the client with rep.
// The flow takes c: it ends when the tunnel ends, or at once when refused or failed, and then
// gives the connection's admission back and marks it done.
func (s *inboundServer) flow(c *inboundConn, req inboundRequest, rep inboundReply) {
	r := s.r
	c.taken = true
	p := r.pol.Load()
	src := netaddr.AddrPort(c.RemoteAddr())
	src = netip.AddrPortFrom(c.id.src, src.Port())
	f := r.newFlow(src)
	f.Inbound, f.Dst, f.Host, f.Owner = c.in.Name, req.dst, req.name, c.id.owner
	pf := policy.Flow{Network: rules.TCP, Dst: req.dst.Addr(), Port: req.dst.Port(), Host: req.name}
	c.id.apply(&pf)
	p = r.forGuest(p, &pf) // a switched guest's profile (profile.go)
	release := r.names(&pf)
	f.Host = pf.Host
	done := func() {
		if release != nil {
			release()
		}
		c.slot()
	}
	d, out, err := r.open(s.ctx, p, f, &pf, early{read: req.early})
	if out == nil && f.gate != nil && rep.ok() == nil {
		c.stop()
		c.TCPConn.SetDeadline(time.Time{})
		r.serveGate(s.ctx, p, c.TCPConn, req.early, f.gate.fw, f, &pf, done)
		return
	}
	if out == nil {
		c.stop()
		switch {
		case err == nil && !admits(d):
			rep.refused(f, d)
		case err == errOverUpload:
			rep.fail(nil) // refused: an HTTP 403, SOCKS "not allowed"
		default:
			rep.fail(err)
		}
		c.TCPConn.Close()
		r.endFlow(f, done)
		return
	}
	if err := rep.ok(); err != nil {
		c.stop()
		out.Close()
		c.TCPConn.Close()
		f.Err = fmt.Errorf("answer the client: %w", err)
		r.endFlow(f, done)
		return
	}
	c.stop()
	c.TCPConn.SetDeadline(time.Time{})
	r.relayFlow(p, f, c.TCPConn, out, done)
}

// Errors of a requested destination.
var (
	errNoPort        = errors.New("port 0")
	errLiteralName   = errors.New("a name that resolvers read as an address")
	errInvalidName   = errors.New("not a host name")
	errReservedName  = errors.New("a name under .invalid")
	errZonedAddress  = errors.New("an address with a zone")
	errNoDestination = errors.New("no destination")
)

// loopback4 is where localhost and *.localhost lead, as the router's DNS server answers them.
var loopback4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// target turns the host and port a client asked for into its request: an address (unmapped),
// or a name, normalized and checked (see the comment at the top of the file).
func target(host string, port uint16) (inboundRequest, error) {
	if port == 0 {
		return inboundRequest{}, errNoPort
	}
	if host == "" {
		return inboundRequest{}, errNoDestination
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return inboundRequest{}, fmt.Errorf("%q: %w", host, errZonedAddress)
		}
		return inboundRequest{dst: netip.AddrPortFrom(a.Unmap(), port)}, nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if !hostName(name) {
		return inboundRequest{}, fmt.Errorf("%q: %w", host, errInvalidName)
	}
	if dns.IsIPLiteral(name) {
		return inboundRequest{}, fmt.Errorf("%q: %w", host, errLiteralName)
	}
	switch {
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		return inboundRequest{name: name, dst: netip.AddrPortFrom(loopback4, port)}, nil
	case name == "invalid" || strings.HasSuffix(name, ".invalid"):
		return inboundRequest{}, fmt.Errorf("%q: %w", host, errReservedName)
	}
	return inboundRequest{name: name, dst: netip.AddrPortFrom(netip.Addr{}, port)}, nil
}

// hostName reports whether s is a DNS host name in lower case: 1 to 253 bytes, labels of 1 to
// 63 letters, digits, '-' and '_'.
func hostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// inboundAdmission bounds an inbound's connections: total in all, shared fairly between
// guests (shares: a quarter kept for a guest not yet seen; see guestOf), and perSource per
// client address inside its guest's share. Safe for concurrent use.
type inboundAdmission struct {
	perSource int
	guests    *shares

	mu sync.Mutex
	n  map[netip.Addr]int // connections per client address
}

func newInboundAdmission(perSource, total int) *inboundAdmission {
	return &inboundAdmission{perSource: perSource, guests: newShares(total, total/4, min(64, perSource), 0), n: map[netip.Addr]int{}}
}

// take admits a connection from src of guest, or reports false when src, its guest or the
// inbound is at its limit. Each admitted connection is given back once with give.
func (a *inboundAdmission) take(guest string, src netip.Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n[src] >= a.perSource || !a.guests.tryAcquire(guest) {
		return false
	}
	a.n[src]++
	return true
}

func (a *inboundAdmission) give(guest string, src netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n[src]--; a.n[src] <= 0 {
		delete(a.n, src)
	}
	a.guests.release(guest)
}
