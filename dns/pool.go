package dns

import (
	"container/list"
	"encoding/binary"
	"net/netip"
	"sync"
	"time"
)

// PoolStats describes the fake-IP pool for status output.
type PoolStats struct {
	Prefix netip.Prefix // the configured pool
	Size   int          // addresses that can be handed out (the prefix less its first and last)
	Mapped int          // addresses that currently stand for a name
	InUse  int          // mapped addresses with at least one open flow (see Server.Acquire)
}

// pool hands out fake IPv4 addresses from a prefix and remembers address <-> name.
//
// Life of a mapping:
//
//	(free) --assign--> idle --acquire--> in use --last release--> idle
//	                     |                                          |
//	                     +--- reused for another name: only when idle for longer than linger
//	                          and no never-used address is left; least recently used first
//
// A mapping is touched (its idle clock restarts) when its name is answered again and when its
// last flow is released. Mappings never expire on their own: an address keeps meaning its name
// until the pool needs it for another one, so an answer cached past its TTL still works.
//
// mu guards every field below it; the pool is safe for concurrent use.
type pool struct {
	prefix netip.Prefix
	base   uint32 // first address that can be handed out
	size   uint32 // number of addresses that can be handed out
	linger time.Duration
	now    func() time.Time

	mu     sync.Mutex
	next   uint32 // offsets below next have been handed out at least once
	byName map[string]*mapping
	byOff  map[uint32]*mapping
	idle   list.List // of *mapping with refs == 0, least recently touched first
	inUse  int       // mappings with refs > 0
}

type mapping struct {
	name string
	off  uint32
	refs int
	last time.Time     // last touch
	elem *list.Element // in pool.idle while refs == 0, else nil
}

// newPool expects an IPv4 prefix of at most /30 (checked by New).
func newPool(prefix netip.Prefix, linger time.Duration, now func() time.Time) *pool {
	b := prefix.Addr().As4()
	p := &pool{
		prefix: prefix,
		base:   binary.BigEndian.Uint32(b[:]) + 1,
		size:   uint32(1)<<(32-prefix.Bits()) - 2,
		linger: linger,
		now:    now,
		byName: make(map[string]*mapping),
		byOff:  make(map[uint32]*mapping),
	}
	p.idle.Init()
	return p
}

func (p *pool) addr(off uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], p.base+off)
	return netip.AddrFrom4(b)
}

// offset returns the offset of a in the pool; ok is false for an address outside the range
// that can be handed out.
func (p *pool) offset(a netip.Addr) (uint32, bool) {
	a = a.Unmap()
	if !a.Is4() || !p.prefix.Contains(a) {
		return 0, false
	}
	b := a.As4()
	v := binary.BigEndian.Uint32(b[:])
	if v < p.base || v-p.base >= p.size {
		return 0, false
	}
	return v - p.base, true
}

// assign returns the address for name, handing out a new one when the name has none. ok is
// false when the pool is exhausted: every address is in use or was touched within linger.
// reused is the name whose mapping was taken over, if any.
func (p *pool) assign(name string) (a netip.Addr, reused string, ok bool) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.byName[name]; m != nil {
		m.last = now
		if m.elem != nil {
			p.idle.MoveToBack(m.elem)
		}
		return p.addr(m.off), "", true
	}
	var m *mapping
	if p.next < p.size {
		m = &mapping{off: p.next}
		p.next++
		p.byOff[m.off] = m
		m.elem = p.idle.PushBack(m)
	} else {
		front := p.idle.Front()
		if front == nil {
			return netip.Addr{}, "", false
		}
		m = front.Value.(*mapping)
		if now.Sub(m.last) <= p.linger {
			return netip.Addr{}, "", false
		}
		reused = m.name
		delete(p.byName, m.name)
		p.idle.MoveToBack(front)
	}
	m.name = name
	m.last = now
	p.byName[name] = m
	return p.addr(m.off), reused, true
}

// lookup returns the name behind a without touching the mapping.
func (p *pool) lookup(a netip.Addr) (string, bool) {
	off, ok := p.offset(a)
	if !ok {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.byOff[off]; m != nil {
		return m.name, true
	}
	return "", false
}

// acquire marks the mapping of a as in use until the returned release is called (release is
// idempotent and safe for concurrent use). ok is false when a stands for no name.
func (p *pool) acquire(a netip.Addr) (name string, release func(), ok bool) {
	off, ok := p.offset(a)
	if !ok {
		return "", nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.byOff[off]
	if m == nil {
		return "", nil, false
	}
	m.refs++
	if m.refs == 1 {
		p.idle.Remove(m.elem)
		m.elem = nil
		p.inUse++
	}
	var once sync.Once
	return m.name, func() { once.Do(func() { p.release(m) }) }, true
}

func (p *pool) release(m *mapping) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	m.refs--
	if m.refs == 0 {
		m.last = now
		m.elem = p.idle.PushBack(m)
		p.inUse--
	}
}

func (p *pool) stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{Prefix: p.prefix, Size: int(p.size), Mapped: len(p.byOff), InUse: p.inUse}
}
