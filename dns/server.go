// Package dns answers the DNS queries that the router captures, so that no query leaves the
// host except through the SOCKS5 upstream (a hypervisor that resolves with the host's resolver would tell the home ISP every name the agent looks up).
//
// Two modes:
//
//   - ModeFakeIP (default): an A query is answered with an address from a private pool
//     (198.18.0.0/15 unless configured); the router asks NameFor/Acquire for the name behind a
//     pool address and hands that name to the proxy (SOCKS5 ATYP domain), so the proxy
//     resolves it. AAAA, HTTPS and SVCB get NODATA, so clients use the pool address. Other
//     types (MX, TXT, SRV, PTR of public addresses, ...) are relayed through the proxy to
//     Config.Resolver with A/AAAA/HTTPS/SVCB records stripped from the reply; without a
//     proxy dialer they get NODATA.
//   - ModeProxy: every query is relayed over TCP through the proxy to Config.Resolver, with a
//     cache that honours TTLs; the addresses in A/AAAA answers are remembered so that NameFor
//     gives the name for rules and for ATYP domain.
//
// In both modes: names in Config.DirectNames are resolved by the host's resolver through the
// router's own dialer (the only direct path); localhost and *.localhost are answered locally
// (127.0.0.1, ::1; RFC 6761), *.invalid is NXDOMAIN, and reverse zones of private and special
// ranges (RFC 6303) are NXDOMAIN without asking anyone. An upstream failure is SERVFAIL, never
// a fallback to a direct query.
//
// Replies carry EDNS0 (udp size 1232, DO copied) when the query did; an EDNS version other
// than 0 gets BADVERS. A class other than IN (CHAOS included) gets REFUSED; an opcode other
// than QUERY, and the QTYPEs ANY, AXFR, IXFR, MAILA and MAILB get NOTIMP; a message without
// exactly one question or with more than one OPT gets FORMERR; a message that is itself a
// response gets no reply.
//
// # A hostile client
//
// The guest runs code nobody reviewed, so every client is assumed to attack the server:
//
//   - IP literals are never names. A question whose name is an address literal (IsIPLiteral:
//     "127.0.0.1", "127.1", "0x7f.1", "2130706433", any name whose last label is a number,
//     "::1", "*.ipv6-literal.net") is answered NXDOMAIN in both modes and for every type, as a
//     public resolver would (there is no such top-level domain), without asking anyone and
//     without a fake IP; the pool refuses such a name too. Otherwise a connection to its fake
//     IP would hand the proxy the "name" 127.0.0.1, and a proxy on the host would connect to
//     the host's loopback. PTR and other questions under in-addr.arpa and ip6.arpa for pool
//     addresses (IPv4-mapped IPv6 included) are answered locally and never create a mapping.
//   - Fair shares of the fake-IP pool. Queries are accounted to their Source (HandleFrom,
//     HandleWireFrom, Serve; Handle and HandleWire account to one "unknown" source). When the
//     pool has neither a never-used address nor one idle for longer than Linger, the source
//     holding the most idle addresses gives up its least recently used one, even before
//     Linger: a flooding source recycles its own names and the others keep resolving. The
//     share is thus max-min, not a fixed fraction: with a fixed quarter of the pool each, four
//     sources would fill it within their shares and starve a fifth. Addresses in use (Acquire)
//     are never taken, nor early a name that another source asked for within Linger. IPv4
//     sources are told apart by address, IPv6 ones by /64; at most 1024 sources have a budget
//     of their own (one quiet for longer than Linger gives its place up), later ones share
//     one overflow budget. A query's pool work is O(log 1024) plus at most 16 names looked at,
//     whatever the input; memory is one mapping per pool address and 1025 budgets at most.
//   - Queries waiting for an upstream: 32 per source, 256 in all; beyond, SERVFAIL at once.
//     DNS over TCP (Serve): any number of queries per connection while the next comes within
//     10 s; 16 connections per source, 256 in all (then the least recently active connection
//     of the source holding the most gives way); accept errors are retried after a pause
//     (5 ms doubling to 1 s), never fatal. See limits.go.
//   - Refused, failed and over-limit queries are counted and logged as one summary line per
//     Config.SummaryEvery, never one line per query.
package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/conf"
	summary "github.com/agentcage/router/internal/tally"
	"github.com/agentcage/router/rules/refusal"
)

// Mode selects how queries are answered.
type Mode int

const (
	ModeFakeIP Mode = iota // answer A from a private pool, hand names to the proxy
	ModeProxy              // relay queries through the proxy to the resolver
)

// String returns the config spelling: "fake-ip" or "proxy".
func (m Mode) String() string {
	switch m {
	case ModeFakeIP:
		return "fake-ip"
	case ModeProxy:
		return "proxy"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode parses the config spelling of a mode; "" is ModeFakeIP.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "fake-ip":
		return ModeFakeIP, nil
	case "proxy":
		return ModeProxy, nil
	}
	return 0, fmt.Errorf("dns mode %q: want \"fake-ip\" or \"proxy\"", s)
}

// Defaults applied by New to zero Config fields that are not config keys; the defaults of
// the keys ([dns] resolver, pool, ttl) are conf's.
const (
	DefaultLinger  = 10 * time.Minute
	DefaultTimeout = 5 * time.Second
)

// udpSize is the EDNS0 payload size we advertise and the largest UDP reply we send (DNS flag
// day 2020).
const udpSize = 1232

// Config is the validated [dns] section plus knobs for tests. The zero value of each field
// means its default.
type Config struct {
	Mode Mode
	// Pool is the IPv4 prefix fake addresses come from: at least a /24 and masked (package
	// conf also keeps it off special and VM ranges). Its first and last addresses are never
	// handed out. Default conf.DefaultPool.
	Pool netip.Prefix
	// TTL of fake answers, of the local negative answers and of PTR answers for pool
	// addresses; whole seconds, 1 s to 1 h. Default conf.DefaultFakeTTL.
	TTL time.Duration
	// Linger is how long a pool address stays reserved for its name after its last answer or
	// its last flow; only then may it be reused for another name, unless the pool is full and
	// the name is the least recently used of the source holding the most idle addresses (see
	// the package doc). At least TTL; default 10 min.
	Linger time.Duration
	// Resolver is the host:port that queries are relayed to through the proxy (ModeProxy, and
	// in ModeFakeIP the types that are not faked and ResolveViaProxy). A host name is fine:
	// the proxy resolves it. Default conf.DefaultResolver.
	Resolver string
	// DirectNames are exact names and "*.suffix" patterns (strictly below suffix) that are
	// resolved by Dialers.DirectResolver through Dialers.Direct, and answered with real
	// addresses. Nothing else is ever resolved directly.
	DirectNames []string
	// Timeout bounds one relayed or direct query. Default 5 s.
	Timeout time.Duration
	// Guests are the VM networks: a client inside one is budgeted as its network, one guest
	// however many of its addresses it asks from (fake-IP addresses, queries waiting for an
	// upstream, the upstream's connections). A client in none is budgeted by its address
	// (an IPv6 one by its /64).
	Guests []netip.Prefix
	// SummaryEvery is the interval of the summary log line of refused, failed and over-limit
	// queries. Default DefaultSummaryEvery.
	SummaryEvery time.Duration
	// Budget bounds the distinct names a guest looks up under one registrable domain
	// (see NameBudget); past it a new name is answered NXDOMAIN with an Extended DNS Error
	// and counted (refusal.Budget), unless Budget.Over lets it on. The zero value limits
	// nothing.
	Budget NameBudget
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DialFunc dials addr ("host:port") on network ("tcp" or "udp").
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Dialers are the ways out that the router gives the server, and where it counts what it
// refuses.
type Dialers struct {
	// Refusals, when not nil, counts the queries the server refuses: a name that is an IP
	// literal (refusal.DNS), and queries or TCP connections over a source's limits or with
	// the pool full (refusal.Limit).
	Refusals *refusal.Book
	// Proxy connects to addr through the SOCKS5 upstream (TCP only). Required in ModeProxy;
	// nil in ModeFakeIP means types other than A are answered NODATA and ResolveViaProxy fails.
	Proxy DialFunc
	// ProxyPacket, when not nil, carries the relayed queries instead of Proxy: as datagrams
	// through a UDP association of the upstream ([dns] transport = "udp"), one association
	// for all queries; a truncated answer is asked again over Proxy. Proxy is still required
	// in ModeProxy.
	ProxyPacket PacketDialFunc
	// Direct is the router's own dialer, whose traffic is never captured. It is used for
	// DirectNames only, "udp" first then "tcp" for truncated replies. Required when
	// Config.DirectNames is not empty, otherwise never called.
	Direct DialFunc
	// DirectResolver is the "ip:port" of the host's resolver for DirectNames (see
	// ParseResolvConf). Required when Config.DirectNames is not empty.
	DirectResolver string
	// Walls, when not nil, are the host walls for the real addresses the server answers
	// with (ModeProxy, DirectNames): a caged client is never told an address that the walls
	// refuse it on every port (see Walls).
	Walls Walls
	// Names, when not nil, is asked in ModeFakeIP whether a name is refused to the asking
	// client on every port (see Names).
	Names Names
	// Why, when not nil, answers a client's why query (see WhyZone); without it the name is
	// NXDOMAIN like the rest of .invalid.
	Why Why
	// Canaries, when not nil, finds brokered credentials' placeholders in names (see
	// Canaries).
	Canaries Canaries
}

// Canaries find a brokered credential's placeholder in a name: a guest that writes the
// placeholder it holds into a name it looks up (a DNS tunnel's label, a name built from its
// environment) is carrying it out. Such a query is answered NXDOMAIN with an Extended DNS
// Error 18 "Prohibited", never relayed, counted (refusal.Canary) and logged once per
// guest, credential and registrable domain. Every query is asked, in every mode. Methods
// are called concurrently.
type Canaries interface {
	// Hit reports the credential (its name, never its value) whose placeholder name holds.
	Hit(name string) (credential string, hit bool)
}

// Names is the router's policy as the DNS server asks it about a name, in ModeFakeIP, where
// a flow to a fake IP is decided by its name alone: a name that every flow from the client
// would be refused to (a block rule, a caged client that no rule lets out) is answered
// NXDOMAIN with an Extended DNS Error (RFC 8914, 15 "Blocked") whose text says why and how
// the host's owner can allow it, and no fake IP is given out for it; the query is counted
// under the reason. Names this server answers itself (localhost, reverse names, DirectNames)
// are never asked. Methods are called concurrently.
type Names interface {
	// Refused reports whether every flow of src to name would be refused, the reason it is
	// counted under, the rule (or step) that refuses it, and the text for the answer (no
	// secret: a rule's name, never its config's values).
	Refused(src Source, name string) (why refusal.Reason, rule, text string, refused bool)
}

// Walls are the host walls as the DNS server asks them (the router's policy): the answers
// to a caged client leave out every A and AAAA record whose address a caged flow may reach
// on no port at all (this machine's loopback, link-local or other addresses, where no
// forward or inbound listens and no rule names them; another guest's network no rule
// names), and the query is counted under that reason; CNAMEs and the other records stay.
// Methods are called concurrently.
type Walls interface {
	// Caged reports whether the flows of src are caged.
	Caged(src Source) bool
	// Refused reports whether a caged flow may reach a on no port, and the reason.
	Refused(a netip.Addr) (refusal.Reason, bool)
}

// Server answers DNS queries. It is safe for concurrent use. Close releases the upstream
// connections; after Close, fake answers and cached answers still work and queries that need
// the network get SERVFAIL.
type Server struct {
	mode    Mode
	ttl     uint32 // seconds
	timeout time.Duration
	now     func() time.Time
	log     *slog.Logger

	pool   *pool // nil in ModeProxy
	local  []netip.Prefix
	direct nameSet

	proxy      exchanger // nil when Dialers.Proxy is nil: a tcpUpstream, or a udpUpstream with ProxyPacket
	dialDirect DialFunc
	directAddr string
	book       *refusal.Book // nil: refusals are only summed up in the log

	cache *answerCache
	seen  *seenAddrs

	walls        Walls        // nil: answers are not walled
	names        Names        // nil: names are not refused at the answer
	why          Why          // nil: why queries are not answered
	budget       *budget      // nil: no budget
	canaries     Canaries     // nil: no credential is brokered
	canaryLogged summary.Once // the canary lines logged, once per guest, credential and domain

	tally    *tally // refused, failed and over-limit queries
	inflight *gate  // queries waiting for an upstream
	guests   []netip.Prefix
	upConns  *fairGate     // the relayed queries' hold on the upstream's connections, by guest
	failed   *failureCache // names whose relayed query failed lately

	// TCP limits of Serve (constants; tests lower them).
	tcpPerSource, tcpTotal int
	tcpIdle, tcpFirstRead  time.Duration

	closed atomic.Bool // set by Close: no more direct queries
}

// New validates cfg and d, applies defaults and returns a server; it starts nothing. A nil
// log discards.
func New(cfg Config, d Dialers, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TTL == 0 {
		cfg.TTL = conf.DefaultFakeTTL
	}
	if err := conf.CheckTTL(cfg.TTL); err != nil {
		return nil, fmt.Errorf("dns ttl: %w", err)
	}
	if cfg.Linger == 0 {
		cfg.Linger = max(DefaultLinger, cfg.TTL)
	}
	if cfg.Linger < cfg.TTL {
		return nil, fmt.Errorf("dns linger %v: want at least the ttl %v", cfg.Linger, cfg.TTL)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("dns timeout %v: want a positive duration", cfg.Timeout)
	}
	if cfg.Resolver == "" {
		cfg.Resolver = conf.DefaultResolver
	}
	if cfg.SummaryEvery == 0 {
		cfg.SummaryEvery = DefaultSummaryEvery
	}
	if cfg.SummaryEvery < 0 {
		return nil, fmt.Errorf("dns summary interval %v: want a positive duration", cfg.SummaryEvery)
	}
	if err := conf.CheckResolver(cfg.Resolver); err != nil {
		return nil, fmt.Errorf("dns resolver: %w", err)
	}
	direct, err := newNameSet(cfg.DirectNames)
	if err != nil {
		return nil, fmt.Errorf("dns direct_names: %w", err)
	}
	if !direct.empty() {
		if d.Direct == nil {
			return nil, errors.New("dns direct_names: no direct dialer")
		}
		if err := checkHostPort(d.DirectResolver, true); err != nil {
			return nil, fmt.Errorf("dns direct resolver: %w", err)
		}
	}
	s := &Server{
		mode:       cfg.Mode,
		ttl:        uint32(cfg.TTL / time.Second),
		timeout:    cfg.Timeout,
		now:        cfg.Now,
		log:        log,
		local:      localRanges(),
		direct:     direct,
		dialDirect: d.Direct,
		directAddr: d.DirectResolver,
		cache:      newAnswerCache(cfg.Now),
		seen:       newSeenAddrs(cfg.Now),
		tally:      newTally(log, cfg.SummaryEvery),
		inflight:   newGate(maxInflightPerSource, maxInflight),
		guests:     slices.Clone(cfg.Guests),
		upConns:    newFairGate(maxUpstreamConns, upstreamHeadroom, upstreamMinShare),
		failed:     newFailureCache(cfg.Now),
		budget:     newBudget(cfg.Budget, cfg.Now, log),

		tcpPerSource: tcpPerSource,
		tcpTotal:     tcpTotal,
		tcpIdle:      tcpIdle,
		tcpFirstRead: tcpFirstRead,
	}
	switch cfg.Mode {
	case ModeFakeIP:
		if !cfg.Pool.IsValid() {
			cfg.Pool = conf.DefaultPool()
		}
		if err := conf.CheckPool(cfg.Pool); err != nil {
			return nil, fmt.Errorf("dns pool: %w", err)
		}
		s.pool = newPool(cfg.Pool, cfg.Linger, cfg.Now)
		s.local = append(s.local, cfg.Pool)
	case ModeProxy:
		if d.Proxy == nil {
			return nil, errors.New("dns mode proxy: no proxy dialer")
		}
	default:
		return nil, fmt.Errorf("dns mode %v: unknown", cfg.Mode)
	}
	if d.Proxy != nil {
		tcp := newTCPUpstream(d.Proxy, cfg.Resolver, cfg.Now)
		s.proxy = tcp
		if d.ProxyPacket != nil {
			s.proxy = newUDPUpstream(d.ProxyPacket, cfg.Resolver, tcp)
		}
	}
	s.book = d.Refusals
	s.walls = d.Walls
	s.names = d.Names
	s.why = d.Why
	s.canaries = d.Canaries
	return s, nil
}

// refused counts a refused query (or TCP connection) of source k, for name when there is one.
func (s *Server) refused(why refusal.Reason, k sourceKey, name string) {
	if s.book == nil {
		return
	}
	e := refusal.Event{Host: name, App: k.app}
	if k.prefix.IsValid() {
		e.Src = netip.AddrPortFrom(k.prefix.Addr(), 0)
	}
	s.book.Add(why, e)
}

// refusedName counts a name the policy refuses to src, by rule (see Names).
func (s *Server) refusedName(why refusal.Reason, src Source, name, rule string) {
	if s.book == nil {
		return
	}
	s.book.Add(why, refusal.Event{Src: netip.AddrPortFrom(src.Addr, 0), Host: name, App: src.App, Rule: rule})
}

func checkHostPort(hp string, wantIP bool) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return fmt.Errorf("%q: %w", hp, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q: bad port", hp)
	}
	if host == "" {
		return fmt.Errorf("%q: no host", hp)
	}
	if _, err := netip.ParseAddr(host); wantIP && err != nil {
		return fmt.Errorf("%q: want an IP address: %w", hp, err)
	}
	return nil
}

// Close closes idle upstream connections and stops new relayed and direct queries (they get
// SERVFAIL), and logs the pending summary of refused and failed queries. It is idempotent and
// always returns nil.
func (s *Server) Close() error {
	s.closed.Store(true)
	if s.proxy != nil {
		s.proxy.close()
	}
	s.tally.flush()
	return nil
}

// Mode reports the server's mode.
func (s *Server) Mode() Mode { return s.mode }

// InPool reports whether a is inside the fake-IP pool prefix (false in ModeProxy). The router
// refuses a flow to a pool address that NameFor does not know, and never forwards it.
func (s *Server) InPool(a netip.Addr) bool {
	return s.pool != nil && s.pool.prefix.Contains(a.Unmap())
}

// NameFor returns the name behind a: for a pool address its mapping (without touching it), for
// another address the name a relayed or direct answer gave it, while remembered. The name is
// lower case without a trailing dot, ready for SOCKS5 ATYP domain and for rules.
func (s *Server) NameFor(a netip.Addr) (name string, ok bool) {
	if s.InPool(a) {
		return s.pool.lookup(a)
	}
	return s.seen.lookup(a)
}

// Acquire returns the name behind pool address a and keeps the mapping from being reused
// until release is called; the router calls it when a flow to a opens and release when the
// flow closes. release is idempotent and safe for concurrent use. ok is false (and release
// nil) when a is not a pool address with a name.
func (s *Server) Acquire(a netip.Addr) (name string, release func(), ok bool) {
	if s.pool == nil {
		return "", nil, false
	}
	return s.pool.acquire(a)
}

// PoolStats describes the pool; ok is false in ModeProxy.
func (s *Server) PoolStats() (st PoolStats, ok bool) {
	if s.pool == nil {
		return PoolStats{}, false
	}
	return s.pool.stats(), true
}

// ResolveViaProxy looks name up (A and AAAA, through the cache) at Config.Resolver through the
// proxy, for the router to dial a flow to a pool address that a rule sends direct. An address
// in netip.ParseAddr's form is returned as is; another address literal (IsIPLiteral: "127.1",
// "0x7f.1", ...) is an error, never a lookup. Pool addresses in the answer are dropped. It
// fails when no proxy dialer was given, the upstream fails, or no address comes back. It is
// the router's own lookup: no per-source limit applies.
func (s *Server) ResolveViaProxy(ctx context.Context, name string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(name); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	if IsIPLiteral(name) {
		return nil, fmt.Errorf("resolve %q via proxy: an address literal, not a name", name)
	}
	if s.proxy == nil {
		return nil, fmt.Errorf("resolve %s via proxy: no proxy dialer", name)
	}
	fqdn := mdns.Fqdn(name)
	if _, ok := mdns.IsDomainName(fqdn); !ok {
		return nil, fmt.Errorf("resolve %q via proxy: not a domain name", name)
	}
	type result struct {
		m   *mdns.Msg
		err error
	}
	var res [2]result
	var wg sync.WaitGroup
	for i, t := range []uint16{mdns.TypeA, mdns.TypeAAAA} {
		wg.Go(func() {
			m, err := s.relay(ctx, mdns.Question{Name: fqdn, Qtype: t, Qclass: mdns.ClassINET}, nil)
			res[i] = result{m, err}
		})
	}
	wg.Wait()
	var addrs []netip.Addr
	for _, r := range res {
		if r.err != nil {
			continue
		}
		for _, rr := range r.m.Answer {
			var ip net.IP
			switch rr := rr.(type) {
			case *mdns.A:
				ip = rr.A
			case *mdns.AAAA:
				ip = rr.AAAA
			default:
				continue
			}
			if a, ok := netip.AddrFromSlice(ip); ok && !s.InPool(a) {
				addrs = append(addrs, a.Unmap())
			}
		}
	}
	if len(addrs) > 0 {
		return addrs, nil
	}
	if err := errors.Join(res[0].err, res[1].err); err != nil {
		return nil, fmt.Errorf("resolve %s via proxy: %w", name, err)
	}
	return nil, fmt.Errorf("resolve %s via proxy: no address (%s)", name, mdns.RcodeToString[res[0].m.Rcode])
}
