package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules/refusal"
)

// Handle answers req from an unknown source: HandleFrom with the zero Source, so every such
// query shares one budget. Callers that know the client use HandleFrom.
func (s *Server) Handle(ctx context.Context, req *mdns.Msg) *mdns.Msg {
	return s.HandleFrom(ctx, Source{}, req)
}

// HandleFrom answers req, asked by src (whose budgets it is counted against; see Source). It
// returns nil when no reply is due (req is itself a response). It does not truncate: callers
// answering over UDP use Truncate or HandleWireFrom. It blocks at most Config.Timeout (or
// until ctx ends) when the answer needs an upstream. req is not modified.
func (s *Server) HandleFrom(ctx context.Context, src Source, req *mdns.Msg) *mdns.Msg {
	if req.Response {
		return nil
	}
	m := new(mdns.Msg)
	m.SetReply(req)
	if len(req.Question) != 1 {
		m.Question = nil
	}
	m.RecursionAvailable = true
	m.Compress = true
	if req.Opcode != mdns.OpcodeQuery {
		m.Rcode = mdns.RcodeNotImplemented
		return m
	}
	var opt *mdns.OPT
	for _, rr := range req.Extra {
		if o, ok := rr.(*mdns.OPT); ok {
			if opt != nil { // RFC 6891 §6.1.1
				m.Rcode = mdns.RcodeFormatError
				return m
			}
			opt = o
		}
	}
	if len(req.Question) != 1 {
		m.Rcode = mdns.RcodeFormatError
		return m
	}
	if opt != nil {
		ro := &mdns.OPT{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT}}
		ro.SetUDPSize(udpSize)
		if opt.Do() {
			ro.SetDo() // RFC 3225 §3
		}
		m.Extra = []mdns.RR{ro}
		if opt.Version() != 0 {
			m.Rcode = mdns.RcodeBadVers // RFC 6891 §6.1.3
			return m
		}
	}
	k := s.keyOf(src)
	s.answer(ctx, src, k, req.Question[0], m)
	if s.walls != nil && (s.mode == ModeProxy || s.direct.match(canonical(req.Question[0].Name))) && len(m.Answer) > 0 && s.walls.Caged(src) {
		s.wall(k, req.Question[0], m)
	}
	return m
}

// answerSpecial answers, without leaving the process, the names that are the same in every
// mode (an IP literal asked as a name, localhost, .invalid, Firefox's DoH canary), and
// reports whether name was one of them.
func (s *Server) answerSpecial(k sourceKey, q mdns.Question, name string, m *mdns.Msg) bool {
	if IsIPLiteral(q.Name) {
		s.tally.add(evLiteral, k.String(), func() string { return mdns.Type(q.Qtype).String() + " " + q.Name })
		s.refused(refusal.DNS, k, name)
		s.negative(m, mdns.RcodeNameError)
		extendedError(m, mdns.ExtendedErrorCodeBlocked, refusedText(refusal.DNS, "an address written as a name is not resolved"))
		return true
	}
	switch {
	case underOrAt(name, "localhost"):
		switch q.Qtype {
		case mdns.TypeA:
			m.Answer = []mdns.RR{&mdns.A{Hdr: s.hdr(q), A: net.IPv4(127, 0, 0, 1)}}
		case mdns.TypeAAAA:
			m.Answer = []mdns.RR{&mdns.AAAA{Hdr: s.hdr(q), AAAA: net.IPv6loopback}}
		default:
			s.negative(m, mdns.RcodeSuccess)
		}
		return true
	case underOrAt(name, "invalid"):
		s.negative(m, mdns.RcodeNameError)
		return true
	case name == conf.CanaryName:
		// Firefox's canary: NXDOMAIN tells it not to turn DNS over HTTPS on by itself,
		// which would take its names past this server (every mode, every type).
		s.negative(m, mdns.RcodeNameError)
		return true
	}
	return false
}

// canary answers m, and reports true, when name holds a brokered credential's placeholder
// (see Canaries).
func (s *Server) canary(k sourceKey, name string, m *mdns.Msg) bool {
	if s.canaries == nil {
		return false
	}
	cred, hit := s.canaries.Hit(name)
	if !hit {
		return false
	}
	s.refused(refusal.Canary, k, name)
	s.negative(m, mdns.RcodeNameError)
	extendedError(m, mdns.ExtendedErrorCodeProhibited, "refused by the router on the host: the name carries a credential's placeholder")
	domain := Registrable(name)
	key := k.String() + " " + cred + " " + domain
	if s.canaryLogged.First(key) {
		s.log.Warn("canary: a guest looked up a name carrying a brokered credential's placeholder; refused",
			"guest", k.String(), "credential", cred, "domain", domain)
	}
	return true
}

// refuseName answers m, and reports true, when the policy refuses every flow of src to name
// (see Names) or the name is past src's budget (see NameBudget). Reverse names and the root
// are never judged.
func (s *Server) refuseName(ctx context.Context, src Source, k sourceKey, name string, m *mdns.Msg) bool {
	if name == "" || underOrAt(name, "arpa") {
		return false
	}
	if s.names != nil {
		if why, rule, text, refused := s.names.Refused(src, name); refused {
			s.refusedName(why, src, name, rule)
			s.negative(m, mdns.RcodeNameError)
			extendedError(m, mdns.ExtendedErrorCodeBlocked, text)
			return true
		}
	}
	return s.overBudget(ctx, k, name, m)
}

// overBudget answers m, and reports true, when name is past k's budget of names under its
// registrable domain and the budget's Over does not let it on (with Ask, the query waits
// for the host's owner within the DNS timeout).
func (s *Server) overBudget(ctx context.Context, k sourceKey, name string, m *mdns.Msg) bool {
	if name == "" || underOrAt(name, "arpa") {
		return false
	}
	domain, n, past := s.budget.over(k, name)
	if !past {
		return false
	}
	actx, cancel := context.WithTimeout(ctx, s.timeout)
	pass := s.budget.decide(actx, k, domain, n)
	cancel()
	if pass {
		return false
	}
	s.refused(refusal.Budget, k, name)
	s.negative(m, mdns.RcodeNameError)
	extendedError(m, mdns.ExtendedErrorCodeBlocked, fmt.Sprintf("refused by the router on the host: past this guest's budget of %d names under %s in %v; the host's owner can raise [budget] names_per_domain",
		s.budget.cfg.PerDomain, domain, s.budget.cfg.Window))
	return true
}

// wall leaves out of m's answer the addresses the host walls refuse a caged client on every
// port (see Walls), and counts the query once under the first such address's reason.
func (s *Server) wall(k sourceKey, q mdns.Question, m *mdns.Msg) {
	out := m.Answer[:0:0]
	var why refusal.Reason
	walled := false
	for _, rr := range m.Answer {
		var ip net.IP
		switch rr := rr.(type) {
		case *mdns.A:
			ip = rr.A
		case *mdns.AAAA:
			ip = rr.AAAA
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			if r, refused := s.walls.Refused(a.Unmap()); refused {
				if !walled {
					why, walled = r, true
				}
				continue
			}
		}
		out = append(out, rr)
	}
	if walled {
		m.Answer = out
		s.refused(why, k, canonical(q.Name))
		extendedError(m, mdns.ExtendedErrorCodeBlocked, refusedText(why, "addresses a caged guest may not reach were left out"))
	}
}

// answer fills m (rcode and sections; Extra already holds the OPT, if any) for q, asked by
// src, whose key is k.
func (s *Server) answer(ctx context.Context, src Source, k sourceKey, q mdns.Question, m *mdns.Msg) {
	if q.Qclass != mdns.ClassINET {
		m.Rcode = mdns.RcodeRefused
		return
	}
	switch q.Qtype {
	case mdns.TypeANY, mdns.TypeAXFR, mdns.TypeIXFR, mdns.TypeMAILA, mdns.TypeMAILB:
		m.Rcode = mdns.RcodeNotImplemented
		return
	}
	name := canonical(q.Name)
	if s.canary(k, name, m) {
		return
	}
	if s.answerWhy(src, q, name, m) {
		return
	}
	if s.answerSpecial(k, q, name, m) {
		return
	}
	rev, isRev := reversePrefix(name)
	if isRev && rev.Addr().Is4In6() && rev.Bits() >= 96 {
		rev = netip.PrefixFrom(rev.Addr().Unmap(), rev.Bits()-96) // ::ffff:a.b.c.d is a.b.c.d
	}
	if isRev && s.pool != nil && rev.Bits() == 32 && s.pool.prefix.Contains(rev.Addr()) {
		if n, ok := s.pool.lookup(rev.Addr()); ok {
			if q.Qtype == mdns.TypePTR {
				m.Answer = []mdns.RR{&mdns.PTR{Hdr: s.hdr(q), Ptr: n + "."}}
			} else {
				s.negative(m, mdns.RcodeSuccess)
			}
			return
		}
		s.negative(m, mdns.RcodeNameError)
		return
	}
	if s.direct.match(name) {
		s.answerDirect(ctx, k, q, name, m)
		return
	}
	if isRev && s.isLocal(rev) {
		s.negative(m, mdns.RcodeNameError)
		return
	}

	if s.mode == ModeProxy {
		if s.overBudget(ctx, k, name, m) {
			return
		}
		s.answerRelayed(ctx, k, q, name, m)
		return
	}
	if s.refuseName(ctx, src, k, name, m) {
		return
	}
	switch q.Qtype {
	case mdns.TypeA:
		switch {
		case name == "" || underOrAt(name, "arpa"):
			s.negative(m, mdns.RcodeSuccess) // no fake address for the root or reverse names
			return
		case !isHostname(name):
			s.negative(m, mdns.RcodeNameError) // nothing a proxy could connect to
			return
		}
		g := s.pool.assign(name, k)
		if !g.ok {
			s.tally.add(evPoolFull, k.String(), func() string { return name })
			s.refused(refusal.Limit, k, name)
			m.Rcode = mdns.RcodeServerFailure
			extendedError(m, mdns.ExtendedErrorCodeOther, refusedText(refusal.Limit, "no fake address is free for this source"))
			return
		}
		if g.early {
			s.tally.add(evRecycled, g.from, func() string { return g.addr.String() + " " + g.reused + " -> " + name })
		}
		m.Answer = []mdns.RR{&mdns.A{Hdr: s.hdr(q), A: g.addr.AsSlice()}}
	case mdns.TypeAAAA, mdns.TypeHTTPS, mdns.TypeSVCB:
		s.negative(m, mdns.RcodeSuccess)
	default:
		if s.proxy == nil {
			s.negative(m, mdns.RcodeSuccess)
			return
		}
		s.answerRelayed(ctx, k, q, name, m)
	}
}

// isLocal reports whether every address of p is in a locally served range.
func (s *Server) isLocal(p netip.Prefix) bool {
	for _, r := range s.local {
		if within(p, r) {
			return true
		}
	}
	return false
}

func (s *Server) hdr(q mdns.Question) mdns.RR_Header {
	return mdns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: mdns.ClassINET, Ttl: s.ttl}
}

// negative sets rcode with a SOA in authority, so that caches keep the NODATA or NXDOMAIN for
// the fake TTL (RFC 2308 §3). The SOA is owned by the root, which is in bailiwick for every
// name.
func (s *Server) negative(m *mdns.Msg, rcode int) {
	m.Rcode = rcode
	m.Ns = []mdns.RR{&mdns.SOA{
		Hdr:     mdns.RR_Header{Name: ".", Rrtype: mdns.TypeSOA, Class: mdns.ClassINET, Ttl: s.ttl},
		Ns:      "router.invalid.",
		Mbox:    "hostmaster.router.invalid.",
		Serial:  1,
		Refresh: 3600,
		Retry:   600,
		Expire:  86400,
		Minttl:  s.ttl,
	}}
}

// answerRelayed answers q, asked by k, from the cache or through the proxy. In ModeFakeIP the
// records that would carry real addresses of names (A, AAAA, HTTPS, SVCB) are removed.
func (s *Server) answerRelayed(ctx context.Context, k sourceKey, q mdns.Question, name string, m *mdns.Msg) {
	r, err := s.relay(ctx, q, &k)
	if err != nil {
		ev := evRelayFailed
		if errors.Is(err, errBusy) {
			ev = evBusy
			s.refused(refusal.Limit, k, name)
		}
		s.tally.add(ev, k.String(), func() string { return mdns.Type(q.Qtype).String() + " " + name + ": " + err.Error() })
		m.Rcode = mdns.RcodeServerFailure
		return
	}
	s.fill(m, r)
	if s.mode == ModeFakeIP {
		m.Answer = stripAddrs(m.Answer)
		m.Ns = stripAddrs(m.Ns)
		m.Extra = stripAddrs(m.Extra)
	}
}

// relay returns the answer to q from the cache or from Config.Resolver through the proxy. The
// returned message is the caller's. A and AAAA answers are remembered for NameFor. When src
// is not nil, a query that must ask the upstream takes one of src's in-flight slots, and fails
// with errBusy when there is none.
func (s *Server) relay(ctx context.Context, q mdns.Question, src *sourceKey) (*mdns.Msg, error) {
	k := cacheKey{name: canonical(q.Name), qtype: q.Qtype, qclass: q.Qclass}
	if r, ok := s.cache.get(k); ok {
		return r, nil
	}
	if s.proxy == nil {
		return nil, errors.New("no proxy dialer")
	}
	if err := s.failed.get(k); err != nil {
		return nil, err
	}
	guest := routerKey
	if src != nil {
		if !s.inflight.enter(*src) {
			return nil, errBusy
		}
		defer s.inflight.leave(*src)
		guest = *src
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// The guest's share of the upstream's connections: a guest whose names go unanswered
	// holds its own share, never the others'. The wait is bounded (upstreamWait).
	wctx, wcancel := context.WithTimeout(ctx, upstreamWait)
	err := s.upConns.acquire(wctx, guest)
	wcancel()
	if err != nil {
		return nil, fmt.Errorf("%w: its share of the upstream's connections is taken", errBusy)
	}
	defer s.upConns.release(guest)
	query := new(mdns.Msg)
	query.RecursionDesired = true
	query.Question = []mdns.Question{q}
	r, err := s.proxy.exchange(ctx, query)
	if err != nil {
		// A name the resolver did not answer in time is not asked again for a while; a
		// proxy that cannot be reached says nothing of the name (the next query tries).
		if errors.Is(err, context.DeadlineExceeded) && !errors.Is(ctx.Err(), context.Canceled) {
			s.failed.put(k, err)
		}
		return nil, err
	}
	r = cleaned(r)
	if s.mode == ModeProxy {
		s.seen.rememberAnswer(k.name, r.Answer)
	}
	s.cache.put(k, r)
	return cacheCopy(r), nil
}

// answerDirect answers q (a DirectNames name), asked by src, from the cache or the host's
// resolver.
func (s *Server) answerDirect(ctx context.Context, src sourceKey, q mdns.Question, name string, m *mdns.Msg) {
	k := cacheKey{name: name, qtype: q.Qtype, qclass: q.Qclass, direct: true}
	r, ok := s.cache.get(k)
	if !ok {
		if !s.inflight.enter(src) {
			s.tally.add(evBusy, src.String(), func() string { return mdns.Type(q.Qtype).String() + " " + name + ": " + errBusy.Error() })
			s.refused(refusal.Limit, src, name)
			m.Rcode = mdns.RcodeServerFailure
			return
		}
		defer s.inflight.leave(src)
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		query := new(mdns.Msg)
		query.RecursionDesired = true
		query.Question = []mdns.Question{q}
		query.SetEdns0(udpSize, false)
		var resp *mdns.Msg
		err := errClosed
		if !s.closed.Load() {
			resp, err = exchangeDirect(ctx, s.dialDirect, s.directAddr, query)
		}
		if err != nil {
			s.tally.add(evDirectFailed, src.String(), func() string { return mdns.Type(q.Qtype).String() + " " + name + ": " + err.Error() })
			m.Rcode = mdns.RcodeServerFailure
			return
		}
		resp = cleaned(resp)
		s.seen.rememberAnswer(name, resp.Answer)
		s.cache.put(k, resp)
		r = cacheCopy(resp)
	}
	s.fill(m, r)
}

// cacheCopy returns a copy of r that the caller may change (r may now be owned by the cache).
func cacheCopy(r *mdns.Msg) *mdns.Msg {
	c := &mdns.Msg{}
	c.Rcode = r.Rcode
	c.Answer = copyAged(r.Answer, 0)
	c.Ns = copyAged(r.Ns, 0)
	c.Extra = copyAged(r.Extra, 0)
	return c
}

// cleaned keeps what a cache and a reply may carry from an upstream reply: the rcode and the
// sections without OPT, TSIG and SIG(0). An extended rcode (which needs the OPT we dropped, and
// which we never asked for) becomes SERVFAIL with empty sections.
func cleaned(r *mdns.Msg) *mdns.Msg {
	c := &mdns.Msg{}
	c.Rcode = r.Rcode
	if r.Rcode > 0xF {
		c.Rcode = mdns.RcodeServerFailure
		return c
	}
	c.Answer = r.Answer
	c.Ns = r.Ns
	for _, rr := range r.Extra {
		switch rr.Header().Rrtype {
		case mdns.TypeOPT, mdns.TypeTSIG, mdns.TypeSIG:
			continue
		}
		c.Extra = append(c.Extra, rr)
	}
	return c
}

// fill copies the rcode and sections of r into the reply m, keeping m's OPT.
func (s *Server) fill(m *mdns.Msg, r *mdns.Msg) {
	m.Rcode = r.Rcode
	m.Answer = r.Answer
	m.Ns = r.Ns
	m.Extra = append(r.Extra, m.Extra...)
}

func stripAddrs(rrs []mdns.RR) []mdns.RR {
	out := rrs[:0]
	for _, rr := range rrs {
		switch rr.Header().Rrtype {
		case mdns.TypeA, mdns.TypeAAAA, mdns.TypeHTTPS, mdns.TypeSVCB:
			continue
		}
		out = append(out, rr)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
