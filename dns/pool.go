package dns

import (
	"container/heap"
	"container/list"
	"encoding/binary"
	"net/netip"
	"sync"
	"time"
)

// PoolStats describes the pool for status output.
type PoolStats struct {
	Prefix   netip.Prefix // the configured pool
	Size     int          // addresses that can be handed out (the prefix less its first and last)
	Mapped   int          // addresses that currently stand for a name
	InUse    int          // mapped addresses with at least one open flow (see Server.Acquire)
	Sources  int          // sources with a budget (see Source), the shared overflow budget included
	Recycled uint64       // addresses taken from their name before linger, since New
	Refused  uint64       // A queries answered SERVFAIL for want of an address, since New
}

// Pool limits.
const (
	// maxSources is how many sources get a budget of their own. A source seen when the table
	// is full takes the place of the least recently active one if that one has been quiet
	// for longer than linger (its names then belong to nobody and are reused once idle past
	// linger), else it shares one overflow budget with every other such source.
	maxSources = 1024
	// maxSkip bounds the names looked at per early recycling: names that another source
	// asked for within linger are passed over (moved to the back of the owner's order).
	maxSkip = 16
)

// pool hands out fake IPv4 addresses from a prefix and remembers address <-> name, with a
// budget per source (Source) so that one source cannot starve the others.
//
// Life of a mapping:
//
//	(free) --assign--> idle --acquire--> in use --last release--> idle
//	                     |                                          |
//	                     +--- reused for another name, when a new name needs an address
//	                          and no never-used address is left:
//	                            1. the least recently touched idle mapping of the whole pool,
//	                               if it has been idle for longer than linger; else
//	                            2. early: the least recently touched idle mapping of the
//	                               source holding the most idle mappings (the asker itself
//	                               on a tie), unless a source other than its owner touched
//	                               it within linger; else the query gets SERVFAIL.
//
// A mapping is touched (its idle clock restarts) when its name is answered again and when its
// last flow is released. Mappings never expire on their own: an address keeps meaning its name
// until the pool needs it for another one, so an answer cached past its TTL still works.
//
// Ownership and fairness: a mapping belongs to the source that touched it last (a release
// keeps the owner). Rule 2 is a max-min share: whoever asks, the biggest holder of idle
// addresses pays, so a source holding fewer idle addresses than the biggest always gets
// one, and a lone flooder recycles its own least recently used names instead of failing
// everyone. There is no fixed share: with a fixed one (say a quarter of the pool) four
// sources would fill the pool within their shares and starve the fifth. A mapping in use is
// never recycled; a name that another source asked for within linger is not recycled early,
// so a source cannot take over (by asking for it) a name that someone else has cached and
// then recycle it under them.
//
// Every operation takes O(log maxSources + maxSkip), except that dropping a quiet source's
// budget takes O(its mappings) (paid for by the queries that made them). Memory: at most
// one mapping per address and maxSources+1 budgets.
//
// mu guards every field below it; the pool is safe for concurrent use.
type pool struct {
	prefix     netip.Prefix
	base       uint32 // first address that can be handed out
	size       uint32 // number of addresses that can be handed out
	linger     time.Duration
	now        func() time.Time
	maxSources int

	mu       sync.Mutex
	next     uint32              // offsets below next have been handed out at least once
	byName   map[string]*mapping // by canonical name
	byOff    []*mapping          // by offset; len(byOff) == next
	idle     mlist               // every idle mapping, least recently touched first
	inUse    int                 // mappings with refs > 0
	owners   map[sourceKey]*owner
	active   list.List // of *owner except overflow, least recently active first
	heap     ownerHeap // every live owner, overflow included, most idle mappings first
	overflow *owner    // the budget shared by sources beyond maxSources
	recycled uint64
	refused  uint64
}

// Which links of a mapping a list threads.
const (
	lnAll   = 0 // pool.idle
	lnOwner = 1 // owner.idle
)

type links struct{ prev, next *mapping }

type mapping struct {
	name   string
	off    uint32
	refs   int
	last   time.Time // last touch
	shared time.Time // last touch by a source other than the then owner; zero for none
	owner  *owner    // nil once no source's budget holds it
	ln     [2]links  // in pool.idle and owner.idle while idle
}

// owner is a source's budget.
type owner struct {
	key     sourceKey
	label   string    // for logs
	idle    mlist     // its idle mappings, roughly least recently touched first
	held    int       // its mappings, idle or in use
	last    time.Time // its last query
	gone    bool      // dropped from the table; in-use mappings may still point here
	heapIdx int
	elem    *list.Element // in pool.active; nil for overflow
}

func (o *owner) live() bool { return o != nil && !o.gone }

// newPool expects an IPv4 prefix of at most /30 (checked by New).
func newPool(prefix netip.Prefix, linger time.Duration, now func() time.Time) *pool {
	b := prefix.Addr().As4()
	p := &pool{
		prefix:     prefix,
		base:       binary.BigEndian.Uint32(b[:]) + 1,
		size:       uint32(1)<<(32-prefix.Bits()) - 2,
		linger:     linger,
		now:        now,
		maxSources: maxSources,
		byName:     make(map[string]*mapping),
		owners:     make(map[sourceKey]*owner),
	}
	p.idle.init(lnAll)
	p.active.Init()
	p.overflow = p.newOwner(sourceKey{}, "overflow")
	return p
}

func (p *pool) newOwner(k sourceKey, label string) *owner {
	o := &owner{key: k, label: label}
	o.idle.init(lnOwner)
	heap.Push(&p.heap, o)
	return o
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

// grant is the outcome of assign.
type grant struct {
	addr   netip.Addr
	ok     bool   // false: no address could be had (every candidate in use or protected)
	reused string // the name whose address was taken over, if any
	early  bool   // taken before linger (rule 2)
	from   string // the source it was taken from, when early
}

// assign returns the address for name, asked by the source with key k, handing out a new one
// when the name has none (see the type's doc for which). An address literal (IsIPLiteral)
// never gets one.
func (p *pool) assign(name string, k sourceKey) grant {
	if IsIPLiteral(name) {
		return grant{}
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.ownerFor(k, now)
	if m := p.byName[name]; m != nil {
		p.touch(m, o, now)
		return grant{addr: p.addr(m.off), ok: true}
	}
	var g grant
	var m *mapping
	if p.next < p.size {
		m = &mapping{off: p.next}
		p.next++
		p.byOff = append(p.byOff, m)
	} else {
		if f := p.idle.front(); f != nil && now.Sub(f.last) > p.linger {
			m = f
		} else {
			var from *owner
			if m, from = p.early(o, now); m == nil {
				p.refused++
				return grant{}
			}
			g.early, g.from = true, from.label
			p.recycled++
		}
		g.reused = m.name
		delete(p.byName, m.name)
		p.disown(m)
		p.idle.remove(m)
	}
	m.name, m.last, m.shared = name, now, time.Time{}
	p.byName[name] = m
	p.idle.pushBack(m)
	p.own(m, o)
	g.addr, g.ok = p.addr(m.off), true
	return g
}

// ownerFor returns the budget of k, making one (see maxSources) and marking it active.
func (p *pool) ownerFor(k sourceKey, now time.Time) *owner {
	if o := p.owners[k]; o != nil {
		o.last = now
		p.active.MoveToBack(o.elem)
		return o
	}
	if len(p.owners) >= p.maxSources {
		f := p.active.Front().Value.(*owner)
		if now.Sub(f.last) <= p.linger {
			p.overflow.last = now
			return p.overflow
		}
		p.dropOwner(f)
	}
	o := p.newOwner(k, k.String())
	o.last = now
	o.elem = p.active.PushBack(o)
	p.owners[k] = o
	return o
}

// dropOwner forgets o's budget; its mappings belong to nobody from now on.
func (p *pool) dropOwner(o *owner) {
	for m := o.idle.front(); m != nil; m = o.idle.front() {
		o.idle.remove(m)
		m.owner = nil
	}
	o.gone = true
	heap.Remove(&p.heap, o.heapIdx)
	p.active.Remove(o.elem)
	delete(p.owners, o.key)
}

// early picks an idle mapping to take before linger for asker o (rule 2), or nil.
func (p *pool) early(o *owner, now time.Time) (*mapping, *owner) {
	v := o
	if top := p.heap[0]; top.idle.n > o.idle.n {
		v = top
	}
	for range maxSkip {
		m := v.idle.front()
		if m == nil {
			return nil, nil
		}
		if m.shared.IsZero() || now.Sub(m.shared) > p.linger {
			return m, v
		}
		v.idle.moveToBack(m)
	}
	return nil, nil
}

// touch restarts m's idle clock on a query by o, making o its owner.
func (p *pool) touch(m *mapping, o *owner, now time.Time) {
	if m.owner != o {
		p.disown(m)
		m.shared = m.last
		p.own(m, o)
	} else if m.refs == 0 {
		o.idle.moveToBack(m)
	}
	m.last = now
	if m.refs == 0 {
		p.idle.moveToBack(m)
	}
}

// disown takes m out of its owner's budget.
func (p *pool) disown(m *mapping) {
	if o := m.owner; o.live() {
		if m.refs == 0 {
			o.idle.remove(m)
			heap.Fix(&p.heap, o.heapIdx)
		}
		o.held--
	}
	m.owner = nil
}

// own puts m (owned by nobody) into o's budget.
func (p *pool) own(m *mapping, o *owner) {
	m.owner = o
	o.held++
	if m.refs == 0 {
		o.idle.pushBack(m)
		heap.Fix(&p.heap, o.heapIdx)
	}
}

// lookup returns the name behind a without touching the mapping.
func (p *pool) lookup(a netip.Addr) (string, bool) {
	off, ok := p.offset(a)
	if !ok {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if off < uint32(len(p.byOff)) {
		return p.byOff[off].name, true
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
	if off >= uint32(len(p.byOff)) {
		return "", nil, false
	}
	m := p.byOff[off]
	m.refs++
	if m.refs == 1 {
		p.idle.remove(m)
		if o := m.owner; o.live() {
			o.idle.remove(m)
			heap.Fix(&p.heap, o.heapIdx)
		}
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
	if m.refs > 0 {
		return
	}
	m.last = now
	p.idle.pushBack(m)
	if o := m.owner; o.live() {
		o.idle.pushBack(m)
		heap.Fix(&p.heap, o.heapIdx)
	} else {
		m.owner = nil
	}
	p.inUse--
}

func (p *pool) stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.owners)
	if p.overflow.held > 0 {
		n++
	}
	return PoolStats{Prefix: p.prefix, Size: int(p.size), Mapped: len(p.byOff), InUse: p.inUse,
		Sources: n, Recycled: p.recycled, Refused: p.refused}
}

// mlist is an intrusive doubly linked list of mappings through their ln[w] links, so that a
// mapping sits in two lists without allocations. init before use; do not copy after.
type mlist struct {
	root mapping
	w    int
	n    int
}

func (l *mlist) init(w int) {
	l.w, l.n = w, 0
	l.root.ln[w] = links{&l.root, &l.root}
}

func (l *mlist) front() *mapping {
	if l.n == 0 {
		return nil
	}
	return l.root.ln[l.w].next
}

func (l *mlist) pushBack(m *mapping) {
	last := l.root.ln[l.w].prev
	m.ln[l.w] = links{prev: last, next: &l.root}
	last.ln[l.w].next = m
	l.root.ln[l.w].prev = m
	l.n++
}

// remove takes m out of l; m must be in l.
func (l *mlist) remove(m *mapping) {
	lk := m.ln[l.w]
	lk.prev.ln[l.w].next = lk.next
	lk.next.ln[l.w].prev = lk.prev
	m.ln[l.w] = links{}
	l.n--
}

func (l *mlist) moveToBack(m *mapping) {
	l.remove(m)
	l.pushBack(m)
}

// ownerHeap is a container/heap of owners, the one with the most idle mappings on top.
type ownerHeap []*owner

func (h ownerHeap) Len() int           { return len(h) }
func (h ownerHeap) Less(i, j int) bool { return h[i].idle.n > h[j].idle.n }
func (h ownerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}

func (h *ownerHeap) Push(x any) {
	o := x.(*owner)
	o.heapIdx = len(*h)
	*h = append(*h, o)
}

func (h *ownerHeap) Pop() any {
	old := *h
	o := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	o.heapIdx = -1
	return o
}
