// Package router is the data path. It takes the TCP connections that capture redirected to
// its transparent listener, and the tunnels guests ask of its explicit proxies (inbounds:
// SOCKS5 and HTTP CONNECT), asks the rules what to do with each, and then connects direct,
// connects through an upstream proxy (giving it the host name when one is known), or
// refuses; then it relays both ways. Captured UDP datagrams take the same decision per flow
// and go through the upstream's UDP association, the router's own socket, or nowhere
// (udp.go). It also serves the model forwards (the replacement for
// `netsh interface portproxy`): it accepts and admits their connections and relays the raw
// ones; package router/modelfwd serves the HTTP ones.
//
// Own traffic versus user traffic: every connection the router opens itself (to a proxy, to a
// direct destination, to a forward's target) goes through one Dialer built with the capture's
// Control function (a socket mark on Linux), so capture never takes it back: there is no loop
// by construction. Nothing here ever falls back from a proxy to a direct connection.
//
// The package knows no platform: the original destination of a redirected connection, the
// socket marking, the owner of a local flow and the fake-IP names come in through Options.
package router

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentcage/router/internal/tally"
	"github.com/agentcage/router/router/ask"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/router/broker"
	"github.com/agentcage/router/router/broker/tlsca"
	"github.com/agentcage/router/router/modelfwd"
	"github.com/agentcage/router/router/sniff"
	"github.com/agentcage/router/router/upload"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// Names is the DNS side's knowledge of host names: fake-IP pool addresses and, in proxy
// mode, the addresses seen in answers. A nil Names means no name is ever known.
type Names interface {
	// InPool reports whether a is a fake-IP pool address.
	InPool(a netip.Addr) bool
	// Acquire returns the name behind pool address a and keeps the mapping alive until
	// release is called; ok is false for a pool address nobody was given.
	Acquire(a netip.Addr) (name string, release func(), ok bool)
	// NameFor returns a name that resolved to a (proxy mode), if one is known.
	NameFor(a netip.Addr) (string, bool)
	// ResolveViaProxy looks a name up through the proxy, for a fake-IP flow that a rule
	// sends direct.
	ResolveViaProxy(ctx context.Context, name string) ([]netip.Addr, error)
}

// Options are the collaborators of a Router. Original is required; the rest may be nil.
type Options struct {
	Log *slog.Logger
	// TLSCA is the router's CA, for the destinations whose TLS it terminates (a
	// [[credential]] with tls_terminate); nil: such flows fail.
	TLSCA *tlsca.CA
	// Original returns where a redirected connection came from and was going: with a
	// redirect in the kernel (nftables) the source is the accepted connection's peer; with
	// a reflecting capture (WinDivert) the peer is rewritten and only the capture knows.
	Original func(c *net.TCPConn) (src, dst netip.AddrPort, err error)
	// Control is applied to every socket the router opens (mark it as own traffic).
	Control func(network, address string, c syscall.RawConn) error
	// Owner finds the process of a local flow: c is the accepted connection, src the app's
	// address and dst where it was going. It is only asked when the policy needs it
	// (policy.Policy.NeedsOwner). The answer's CagedSocket is not read: the flow keeps the
	// mark CagedSocket read (rules.Owner.Learn).
	Owner func(c *net.TCPConn, src, dst netip.AddrPort) (rules.Owner, error)
	// OwnerUDP finds the process of a local UDP flow from its addresses (the datagram's
	// source and original destination), when the capture does not say (Datagram.Owner). A
	// UDP flow whose owner the policy needs and nobody finds is refused.
	OwnerUDP func(src, dst netip.AddrPort) (rules.Owner, error)
	// FromVM reports whether a connection from src entered from a VM network or a
	// VM-facing interface (policy.Flow.FromVM), whatever its address. Nil: only sources
	// inside the configured VM networks are.
	FromVM func(src netip.Addr) bool
	// CagedSocket reports whether the capture can have handed over a flow from src to dst
	// only from a caged process's socket (policy.Flow.CagedSocket): then the flow is caged
	// even when its owner is not found (a process that exited at once). Nil: never.
	CagedSocket func(src, dst netip.AddrPort) bool
	// DialTCP opens the router's own connections (direct destinations, upstream proxies).
	// The default dials with Control applied; tests map addresses here.
	DialTCP func(ctx context.Context, dst netip.AddrPort) (*net.TCPConn, error)
	// OriginalFD is Original for the connections the Linux event loops accept themselves,
	// for which no *net.TCPConn exists: fd is the accepted socket (leave it open and as it
	// is) and peer its remote address. It must not block. Nil: the loops set no flow up,
	// every flow takes a goroutine of its own (Original), as on other platforms.
	OriginalFD func(fd int, peer netip.AddrPort) (src, dst netip.AddrPort, err error)
	// ConnectFD opens one of the router's own sockets and starts a non-blocking connect to
	// dst, for the event loops: what DialTCP does for a goroutine. It returns the
	// descriptor, which the caller owns, with the connect in progress or done. Nil: a socket
	// of dst's family with Control applied, unless DialTCP is set (then the loops set no
	// flow up: every flow takes a goroutine, which uses DialTCP).
	ConnectFD func(dst netip.AddrPort) (fd int, err error)
	// GoroutineSetup sets every transparent flow up on a goroutine of its own, as on other
	// platforms, even where the event loops could: the fallback, tested on its own.
	GoroutineSetup bool
	Names          Names
	// Resolve looks up a proxy's host name. It must not go through capture; the default is
	// Go's resolver dialing with Control.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Refusals counts what the router refuses; the daemon shares one Book with the DNS
	// server and the capture. Nil: the Router keeps its own.
	Refusals *refusal.Book
	// Descriptors is the file descriptors the flow budgets are cut from (see admission);
	// 0: this process's limit (RLIMIT_NOFILE).
	Descriptors int
	// Audit is the flow log for audits ([log] flows): every ended and every refused flow is
	// added to it. Nil: none.
	Audit *auditlog.Log
	// Asks holds the flows the policy asks about (package ask) while an administrator
	// answers. Nil: an ask is refused at once, as unattended.
	Asks *ask.Desk
	// Uploads is the upload budget ([budget] bytes_up_per_domain, relay_upload.go): the bytes each
	// guest's relayed flows send up to one domain in a window. Nil: none, and the relay
	// counts nothing for it.
	Uploads *upload.Budget
	// SummaryEvery is the interval of the summary line of refused and failed flows; 0:
	// one minute.
	SummaryEvery time.Duration
}

// Settings is what a reload replaces: the decision, the upstreams and the limits.
type Settings struct {
	// Decision decides every flow; nil decides as an empty config would (everything that is
	// not caged goes direct).
	Decision       *policy.Policy
	Upstreams      []UpstreamConfig
	IdleTimeout    time.Duration
	ConnectTimeout time.Duration
	// AskTimeout is how long a flow held under ask waits for an answer ([policy]
	// ask_timeout); 0: conf.DefaultAskTimeout's 30 s.
	AskTimeout time.Duration
	// Sockmap moves a relayed TCP flow's bytes socket to socket in the kernel (an eBPF
	// sockmap) where the kernel allows it; false, or where it does not, the flows are
	// relayed by splice (Linux) or copied.
	Sockmap bool
	// Forwards are the forwards whose gates serve the caged flows to a model's address
	// (policy.Policy.Gate names one by its Name): the same settings their listeners serve
	// with. A gate the policy names that is not here refuses the flow.
	Forwards []Forward
	// Credentials are the brokered credentials ([[credential]]): the caged flows' first
	// bytes and names are looked at for their placeholders (flow_canary.go); nil for none.
	Credentials *broker.Broker
}

// compiled is a Policy prepared for use.
type compiled struct {
	Settings
	// ups are the upstreams by the name a rule or DNS gives: one proxy's name, or a
	// failover list's names joined by ",".
	ups     map[string]upstream.Upstream
	tracked map[string]*trackedUp // the proxies by name, with their health
	hits    []atomic.Uint64       // [i] rule i
	bytes   []atomic.Uint64       // [i] bytes of the ended flows rule i decided
	// steps and stepBytes count the flows each implicit step decided, by the action it took
	// (a step such as StepHost lets some flows through and refuses others), and the bytes
	// of those that ended.
	steps     [policy.NumSteps][rules.Ask + 1]atomic.Uint64
	stepBytes [policy.NumSteps][rules.Ask + 1]atomic.Uint64
	// profiles are the config's other profiles by name (profile.go); profile is the name of
	// this one's, "" for the default.
	profiles map[string]*compiled
	profile  string
}

// Router runs the transparent listener and forwards. Its methods are safe for concurrent
// use; Apply may be called at any time (a reload) and affects new flows only.
type Router struct {
	log    *slog.Logger
	opts   Options
	dialer *net.Dialer
	pol    atomic.Pointer[compiled]
	loops  *loopSet   // relays the flows
	adm    *admission // what flows may hold: set-up slots and descriptors, by source
	refuse *refusals  // refused and failed flows: a few logged, the rest summed up
	early  sync.Pool  // *[earlyMax]byte: a client's first bytes while its flow is set up
	// sniffBufs: *[sniff.Max]byte, a caged flow's first bytes while their name is read.
	sniffBufs sync.Pool
	flows     sync.WaitGroup
	live      liveFlows
	flowLog   flowLog // flow records written off the relay's and the loops' goroutines
	nextID    atomic.Uint64
	count     counters
	caged     cagedSeen // the caged processes whose flows were decided, for status
	book      *refusal.Book
	udp       udpTable // the UDP flows and their associations (udp.go)

	mu      sync.Mutex            // guards tracked
	tracked map[string]*trackedUp // the proxies in use, their health probes running

	resolved *resolvedNames // what flows' names resolve to, for policy.StepHostName; nil without Names
	carried  carried        // the identities of the flows carried to the router's own listeners (flow_carried.go)
	profiles guestProfiles  // the guests switched to a profile (profile.go)

	customDial bool // Options.DialTCP was given

	model    *modelfwd.Server // serves the HTTP forwards' connections (forward.go)
	canaries tally.Once       // the canaries logged once each (flow_canary.go, and the forwards')
}

// maxSetups bounds the flows Serve sets up at once (deciding, connecting, the SOCKS
// handshake, which waits for the proxy's own connect: up to a few hundred milliseconds over
// the internet), shared between sources by admission. Relayed flows do not count. Measured on the lab with 2,000 idle flows
// opened in a burst: unbounded, the setup goroutines' stacks and garbage left 7.5-10 KiB of
// RSS per flow; 256 leaves 3.6-4.6 and still sets up about 1,000 flows a second through a
// 250 ms proxy; 64 leaves 2.8 but would queue a browser's burst.
const maxSetups = 256

// New returns a Router with the given policy.
func New(p Settings, opts Options) (*Router, error) {
	if opts.Original == nil {
		return nil, errors.New("router: Original is required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	r := &Router{
		log:       opts.Log,
		opts:      opts,
		dialer:    &net.Dialer{Control: opts.Control, KeepAlive: 30 * time.Second},
		loops:     newLoopSet(opts.Log),
		adm:       newAdmission(cmp.Or(opts.Descriptors, descriptorLimit())),
		refuse:    newRefusals(opts.Log, opts.SummaryEvery),
		early:     sync.Pool{New: func() any { return new([earlyMax]byte) }},
		sniffBufs: sync.Pool{New: func() any { return new([sniff.Max]byte) }},
		tracked:   map[string]*trackedUp{},
		book:      opts.Refusals,
	}
	if r.book == nil {
		r.book = new(refusal.Book)
	}
	r.carried.init()
	r.model = modelfwd.New(modelfwd.Config{
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, r.pol.Load().ConnectTimeout)
			defer cancel()
			return r.dialer.DialContext(ctx, network, addr)
		},
		Refusals: r.book,
		Note:     r.refuse.note,
		Canaries: &r.canaries,
	})
	r.customDial = opts.DialTCP != nil
	if r.opts.DialTCP == nil {
		r.opts.DialTCP = func(ctx context.Context, dst netip.AddrPort) (*net.TCPConn, error) {
			return r.dialer.DialTCP(ctx, "tcp", netip.AddrPort{}, dst)
		}
	}
	if r.opts.Resolve == nil {
		res := &net.Resolver{PreferGo: true, Dial: r.dialer.DialContext}
		r.opts.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return res.LookupNetIP(ctx, "ip", host)
		}
	}
	if opts.Names != nil {
		r.resolved = newResolvedNames(opts.Names.ResolveViaProxy)
	}
	if err := r.Apply(p); err != nil {
		return nil, err
	}
	return r, nil
}

// Prepared is a Policy checked and compiled for Use; it belongs to the Router that
// prepared it.
type Prepared struct{ c *compiled }

// Prepare checks p and compiles it for Use, without changing anything: a reload prepares
// first and applies only once everything else of the new config is in place.
func (r *Router) Prepare(p Settings) (*Prepared, error) {
	if p.Decision == nil {
		p.Decision = policy.New(nil, policy.Env{})
	}
	if p.IdleTimeout <= 0 {
		return nil, errors.New("router: idle timeout must be positive")
	}
	if p.ConnectTimeout <= 0 {
		return nil, errors.New("router: connect timeout must be positive")
	}
	n := len(p.Decision.Rules())
	np := &compiled{Settings: p, hits: make([]atomic.Uint64, n), bytes: make([]atomic.Uint64, n)}
	if err := r.prepareUpstreams(np); err != nil {
		return nil, err
	}
	if err := r.prepareProfiles(np); err != nil {
		return nil, err
	}
	return &Prepared{c: np}, nil
}

// Use makes a prepared policy the one new flows get, and ends the running flows it refuses
// (reload.go); the others keep theirs. The health probes of the proxies it names run;
// those of proxies it dropped stop.
func (r *Router) Use(pp *Prepared) {
	r.useUpstreams(pp.c)
	r.pol.Store(pp.c)
	r.dropGoneProfiles(pp.c)
	r.endRefused(pp.c, "", "reload ended live flows")
}

// Apply prepares p and uses it.
func (r *Router) Apply(p Settings) error {
	pp, err := r.Prepare(p)
	if err != nil {
		return err
	}
	r.Use(pp)
	return nil
}

// Decision returns the policy new flows are decided by (the last one Use made current).
func (r *Router) Decision() *policy.Policy { return r.pol.Load().Decision }

// Dialer returns the router's own dialer (marked: never captured).
func (r *Router) Dialer() *net.Dialer { return r.dialer }

// relayFor returns the relay settings of the current policy.
func (r *Router) relayFor(p *compiled) relay {
	return relay{idle: p.IdleTimeout, loops: r.loops, sockmap: p.Sockmap}
}

// Wait blocks until every flow started so far has ended.
func (r *Router) Wait() { r.flows.Wait() }

// Close releases the relay's resources and stops the health probes; call it after the
// listeners are closed. Flows still running are ended (their log records say "router
// closed"); Wait then returns once their records are written.
func (r *Router) Close() {
	r.stopUpstreams()
	r.closeUDP()
	r.loops.Close()
	r.model.Close()
	r.refuse.flush()
}
