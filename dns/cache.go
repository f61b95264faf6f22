package dns

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// lru is a bounded map that evicts its least recently used entry. It is not safe for
// concurrent use; its owner holds a lock.
type lru[K comparable, V any] struct {
	max   int
	items map[K]*list.Element
	order list.List // of *lruItem[K, V], least recently used first
}

type lruItem[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	l := &lru[K, V]{max: max, items: make(map[K]*list.Element)}
	l.order.Init()
	return l
}

func (l *lru[K, V]) get(k K) (V, bool) {
	e, ok := l.items[k]
	if !ok {
		var zero V
		return zero, false
	}
	l.order.MoveToBack(e)
	return e.Value.(*lruItem[K, V]).val, true
}

func (l *lru[K, V]) put(k K, v V) {
	if e, ok := l.items[k]; ok {
		e.Value.(*lruItem[K, V]).val = v
		l.order.MoveToBack(e)
		return
	}
	l.items[k] = l.order.PushBack(&lruItem[K, V]{key: k, val: v})
	for len(l.items) > l.max {
		front := l.order.Front()
		l.order.Remove(front)
		delete(l.items, front.Value.(*lruItem[K, V]).key)
	}
}

func (l *lru[K, V]) remove(k K) {
	if e, ok := l.items[k]; ok {
		l.order.Remove(e)
		delete(l.items, k)
	}
}

// Cache limits.
const (
	cacheEntries = 4096             // answers kept
	maxCacheMsg  = 8192             // larger answers (packed, uncompressed) are not kept: at most 32 MiB
	maxCacheTTL  = 24 * time.Hour   // a longer TTL is cut to this
	maxNegTTL    = 5 * time.Minute  // RFC 2308 §5 suggests a cap of 1 to 3 hours; we keep it short
	seenEntries  = 65536            // address -> name memories kept
	minSeenTTL   = 60 * time.Second // an address is remembered at least this long
)

type cacheKey struct {
	name   string // canonical
	qtype  uint16
	qclass uint16
	direct bool // answered by the direct resolver (DirectNames), not through the proxy
}

type cached struct {
	msg     *mdns.Msg // Rcode, Answer, Ns, Extra (no OPT); never handed out, only copied
	stored  time.Time
	expires time.Time
}

// answerCache keeps upstream answers for their TTL (RFC 1035 §7.4, negative answers per
// RFC 2308 §5). mu guards entries; safe for concurrent use.
type answerCache struct {
	now     func() time.Time
	mu      sync.Mutex
	entries *lru[cacheKey, cached]
}

func newAnswerCache(now func() time.Time) *answerCache {
	return &answerCache{now: now, entries: newLRU[cacheKey, cached](cacheEntries)}
}

// get returns a fresh copy of the cached answer with TTLs lowered by its age.
func (c *answerCache) get(k cacheKey) (*mdns.Msg, bool) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries.get(k)
	if ok && !now.Before(e.expires) {
		c.entries.remove(k)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	age := uint32(now.Sub(e.stored) / time.Second)
	m := &mdns.Msg{}
	m.Rcode = e.msg.Rcode
	m.Answer = copyAged(e.msg.Answer, age)
	m.Ns = copyAged(e.msg.Ns, age)
	m.Extra = copyAged(e.msg.Extra, age)
	return m, true
}

func copyAged(rrs []mdns.RR, age uint32) []mdns.RR {
	if len(rrs) == 0 {
		return nil
	}
	out := make([]mdns.RR, len(rrs))
	for i, rr := range rrs {
		out[i] = mdns.Copy(rr)
		h := out[i].Header()
		if h.Ttl > age {
			h.Ttl -= age
		} else {
			h.Ttl = 0
		}
	}
	return out
}

// put stores m (which the cache keeps; the caller must not change it afterwards) for as long
// as its TTLs allow; answers that must not be cached are dropped.
func (c *answerCache) put(k cacheKey, m *mdns.Msg) {
	ttl, ok := cacheTTL(m)
	if !ok || ttl <= 0 || m.Len() > maxCacheMsg {
		return
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries.put(k, cached{msg: m, stored: now, expires: now.Add(ttl)})
}

// cacheTTL is how long m may be cached: the smallest TTL of its records for a positive answer;
// for NXDOMAIN and NODATA min(SOA TTL, SOA MINIMUM) of the SOA in authority (RFC 2308 §5),
// capped at maxNegTTL, and not at all without a SOA. Other rcodes are not cached.
func cacheTTL(m *mdns.Msg) (time.Duration, bool) {
	negative := m.Rcode == mdns.RcodeNameError || (m.Rcode == mdns.RcodeSuccess && len(m.Answer) == 0)
	if m.Rcode != mdns.RcodeSuccess && m.Rcode != mdns.RcodeNameError {
		return 0, false
	}
	if negative {
		for _, rr := range m.Ns {
			if soa, ok := rr.(*mdns.SOA); ok {
				ttl := min(time.Duration(soa.Hdr.Ttl), time.Duration(soa.Minttl)) * time.Second
				return min(ttl, maxNegTTL), true
			}
		}
		return 0, false
	}
	ttl := maxCacheTTL
	for _, sec := range [][]mdns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if rr.Header().Rrtype == mdns.TypeOPT {
				continue
			}
			ttl = min(ttl, time.Duration(rr.Header().Ttl)*time.Second)
		}
	}
	return ttl, true
}

type seenEntry struct {
	name    string
	expires time.Time
}

// seenAddrs remembers the name that real addresses were answered for (proxy mode, direct
// names), so that rules match the name and the proxy gets it as ATYP domain. Bounded to
// seenEntries (least recently used go first); an entry lives for its record's TTL, at least
// minSeenTTL. mu guards entries; safe for concurrent use.
type seenAddrs struct {
	now     func() time.Time
	mu      sync.Mutex
	entries *lru[netip.Addr, seenEntry]
}

func newSeenAddrs(now func() time.Time) *seenAddrs {
	return &seenAddrs{now: now, entries: newLRU[netip.Addr, seenEntry](seenEntries)}
}

// rememberAnswer records every A and AAAA address (and SVCB/HTTPS address hint) of the
// answer section as belonging to name.
func (s *seenAddrs) rememberAnswer(name string, answer []mdns.RR) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	add := func(ip net.IP, ttl uint32) {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			return
		}
		exp := now.Add(max(time.Duration(ttl)*time.Second, minSeenTTL))
		s.entries.put(a.Unmap(), seenEntry{name: name, expires: exp})
	}
	for _, rr := range answer {
		switch rr := rr.(type) {
		case *mdns.A:
			add(rr.A, rr.Hdr.Ttl)
		case *mdns.AAAA:
			add(rr.AAAA, rr.Hdr.Ttl)
		case *mdns.SVCB:
			addHints(rr.Value, rr.Hdr.Ttl, add)
		case *mdns.HTTPS:
			addHints(rr.Value, rr.Hdr.Ttl, add)
		}
	}
}

func addHints(kv []mdns.SVCBKeyValue, ttl uint32, add func(net.IP, uint32)) {
	for _, v := range kv {
		switch v := v.(type) {
		case *mdns.SVCBIPv4Hint:
			for _, ip := range v.Hint {
				add(ip, ttl)
			}
		case *mdns.SVCBIPv6Hint:
			for _, ip := range v.Hint {
				add(ip, ttl)
			}
		}
	}
}

func (s *seenAddrs) lookup(a netip.Addr) (string, bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries.get(a.Unmap())
	if !ok {
		return "", false
	}
	if !now.Before(e.expires) {
		s.entries.remove(a.Unmap())
		return "", false
	}
	return e.name, true
}
