package rules

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"slices"
	"sync"

	"github.com/agentcage/router/internal/netaddr"
)

// Table is a rule set compiled for fast decisions. It is immutable after Compile and safe for
// concurrent use; a reload compiles a new Table and swaps the pointer.
//
// How Decide works: every field that some rule constrains has an index from the flow's value
// for that field (an address, port, name, app, service) to the set of rules whose entries
// match it, plus the set of rules that leave the field open ("wild"). The candidates are the
// intersection over the fields of (wild ∪ matches), a bitset with one bit per rule. The
// indexes may over-approximate (an app glob is filed as wild); so Decide confirms each
// candidate, lowest index first, with the rule's own matcher, and the first confirmed rule
// wins. An index set stores the rules as a short sorted list, or as a bitset once the list
// would be longer than the bitset, which bounds both the time of a decision (a few passes
// over R/64 words) and the memory of a key (R/8 bytes).
//
// The indexes: addresses and ports are cut into elementary intervals (intervals), searched
// by binary search; names, app names, paths and services are hash tables asked with the
// flow's text folded as it is read (names), a host name's suffixes all hashed in one pass.
// A decision allocates nothing (for text with a byte >= 0x80, see flow) and iterates no map.
type Table struct {
	rules  []Rule
	words  int
	fields []*fieldIndex
	// opens[m] is the intersection of the open sets of the fields in the bit mask m (bit k for
	// fields[k]): a flow usually matches no entry of most fields, and those fields then cost
	// one precomputed bitset together instead of a pass each. nonzero[m] has a bit for every
	// word of opens[m] that is not zero, so a scan skips empty stretches 64 words at a time.
	opens   [][]uint64
	nonzero [][]uint64
	// constrained[i] has bit k set when rule i is not in fields[k].open: the fields whose
	// matches must list it. shapes are its distinct values but 0.
	constrained []uint8
	shapes      []uint8
	pool        sync.Pool // *scratch
}

// maxFields is the number of fields a Table may index: network, sources, hosts, ports,
// apps, services, caged.
const maxFields = 7

type scratch struct {
	parts  []set
	all    [maxFields]fieldState // all[k] for Table.fields[k]
	fields []*fieldState         // the fields intersected word by word, into all
	listed [maxFields]int        // listed[k]: the length of all[k]'s sparse lists together
	dense  [][]uint64
	sparse []cursor
}

// fieldState is one field's candidates for one flow: wild ∪ dense... ∪ sparse....
type fieldState struct {
	wild   []uint64
	dense  [][]uint64 // into scratch.dense
	sparse []cursor   // into scratch.sparse
}

// cursor walks a sorted sparse list word by word.
type cursor struct {
	list []uint32
	pos  int
}

// set is a set of rule indexes: a sorted list, or a bitset when dense.
type set struct {
	list  []uint32
	dense []uint64
}

func (s set) empty() bool { return s.list == nil && s.dense == nil }

// fieldIndex finds the rules whose entries for one field match a flow. One concrete type
// with a switch (rather than an interface per field) keeps the flow on the stack.
type fieldIndex struct {
	field string   // one of the Field constants
	open  []uint64 // rules that do not constrain the field (or are confirmed by their matcher)
	iv    *intervals
	exact names  // hosts: names; apps: image names; services: names
	other names  // hosts: suffixes; apps: full paths
	net   [3]set // network: by Network
	caged set    // caged: the rules that want caged flows
}

// lookup appends the sets of rules that match the flow on this field.
func (x *fieldIndex) lookup(f *flow, parts []set) []set {
	switch x.field {
	case FieldNetwork:
		if s := x.net[f.network]; !s.empty() {
			parts = append(parts, s)
		}
	case FieldSources:
		if f.src.IsValid() {
			parts = x.iv.lookupAddr(f.src, parts)
		}
	case FieldPorts:
		parts = x.iv.lookup(netaddr.Key{Lo: uint64(f.port)}, parts)
	case FieldHosts:
		if x.iv != nil && f.dst.IsValid() {
			parts = x.iv.lookupAddr(f.dst, parts)
		}
		if f.host != "" {
			parts = appendHost(parts, &x.exact, &x.other, f.host)
		}
	case FieldApps:
		if f.app != "" {
			parts = x.exact.appendText(parts, f.app, false)
		}
		if f.path != "" {
			parts = x.other.appendText(parts, f.path, true)
		}
	case FieldServices:
		for _, sv := range f.services {
			parts = x.exact.appendText(parts, foldable(sv), false)
		}
	case FieldCaged:
		if f.caged {
			parts = append(parts, x.caged)
		}
	}
	return parts
}

// Compile builds a Table. The rules must come from the Parse functions (normalized entries);
// the slice is copied.
func Compile(rs []Rule) *Table {
	t := &Table{rules: slices.Clone(rs), words: (len(rs) + 63) / 64}
	b := builder{words: t.words}
	for _, idx := range []*fieldIndex{b.network(t.rules), b.sources(t.rules), b.hosts(t.rules), b.ports(t.rules), b.apps(t.rules), b.services(t.rules), b.cagedField(t.rules)} {
		if idx != nil {
			t.fields = append(t.fields, idx)
		}
	}
	// Most selective field first: the one that leaves the fewest rules open.
	slices.SortStableFunc(t.fields, func(a, b *fieldIndex) int { return popcount(a.open) - popcount(b.open) })
	t.opens = make([][]uint64, 1<<len(t.fields))
	t.nonzero = make([][]uint64, 0, len(t.opens))
	for m := range t.opens {
		o := make([]uint64, t.words)
		for i := range o {
			o[i] = ^uint64(0)
		}
		for k, fi := range t.fields {
			if m&(1<<k) != 0 {
				for i := range o {
					o[i] &= fi.open[i]
				}
			}
		}
		t.opens[m] = o
		nz := make([]uint64, (t.words+63)/64)
		for i, w := range o {
			if w != 0 {
				nz[i/64] |= 1 << (i % 64)
			}
		}
		t.nonzero = append(t.nonzero, nz)
	}
	t.constrained = make([]uint8, len(t.rules))
	for k, fi := range t.fields {
		for i := range t.constrained {
			if fi.open[i/64]&(1<<(i%64)) == 0 {
				t.constrained[i] |= 1 << k
			}
		}
	}
	for _, c := range t.constrained {
		if c != 0 && !slices.Contains(t.shapes, c) {
			t.shapes = append(t.shapes, c)
		}
	}
	t.pool.New = func() any { return new(scratch) }
	return t
}

// Rules returns the table's rules; the caller must not modify them.
func (t *Table) Rules() []Rule { return t.rules }

// Decide returns the verdict of the first rule that matches the flow. It does not modify q.
func (t *Table) Decide(q *Query) Verdict {
	f := newFlow(q)
	return verdictOf(t.rules, t.first(&f))
}

func (t *Table) first(f *flow) int {
	if len(t.rules) == 0 {
		return -1
	}
	s := t.pool.Get().(*scratch)
	defer t.pool.Put(s)
	s.fields, s.dense, s.sparse = s.fields[:0], s.dense[:0], s.sparse[:0]
	all := s.all[:len(t.fields)]
	// Fields whose matches are all short lists are folded into one precomputed bitset, the
	// intersection of their open sets; the rules of those lists are the only candidates that
	// bitset misses, and each is checked against every field on its own. Fields with a
	// dense match set (rare: a key shared by many rules) are intersected word by word.
	folded := 0
	for k, fi := range t.fields {
		s.parts = fi.lookup(f, s.parts[:0])
		d0, s0 := len(s.dense), len(s.sparse)
		s.listed[k] = 0
		for _, p := range s.parts {
			if p.dense != nil {
				s.dense = append(s.dense, p.dense)
			} else {
				s.sparse = append(s.sparse, cursor{})
				s.sparse[len(s.sparse)-1].list = p.list
				s.listed[k] += len(p.list)
			}
		}
		// Filled in place: a fieldState built apart and copied in costs a stalled load (its
		// words were just stored one by one) for every field of every decision.
		st := &all[k]
		st.wild = fi.open
		st.dense = s.dense[d0:len(s.dense):len(s.dense)]
		st.sparse = s.sparse[s0:len(s.sparse):len(s.sparse)]
		if len(st.dense) == 0 {
			folded |= 1 << k
		} else {
			s.fields = append(s.fields, st)
		}
	}
	// The lowest confirmed rule among the listed ones bounds the bitset scan. A rule that
	// some folded field constrains is a candidate only if every field that constrains it
	// lists it: so the rules of one shape (the same constrained fields) are looked for in
	// the shortest lists of one of its folded fields alone, and a shape one of whose folded
	// fields lists nothing has no candidate.
	best := -1
	for _, sh := range t.shapes {
		pick, fewest := -1, 0
		for m := sh & uint8(folded); m != 0; m &= m - 1 {
			if k := bits.TrailingZeros8(m); pick < 0 || s.listed[k] < fewest {
				pick, fewest = k, s.listed[k]
			}
		}
		if fewest == 0 {
			continue // open on every folded field (the bitset scan's), or no candidate
		}
		for _, c := range all[pick].sparse {
			for _, i := range c.list {
				if best >= 0 && int(i) >= best {
					break
				}
				if t.constrained[i] == sh && t.candidate(all, pick, i) && t.rules[i].mismatch(f) == "" {
					best = int(i)
					break
				}
			}
		}
	}
	last := len(t.rules) - 1
	if best >= 0 {
		last = best - 1
	}
	if last < 0 {
		return best
	}
	base := t.opens[folded]
	if len(s.fields) == 0 {
		// Only the precomputed bitset: visit its non-zero words.
		for j, nz := range t.nonzero[folded] {
			for nz != 0 {
				w := j*64 + bits.TrailingZeros64(nz)
				nz &= nz - 1
				if w > last/64 {
					return best
				}
				if i := t.confirm(f, w, base[w], last); i >= 0 {
					return i
				}
			}
		}
		return best
	}
	for w := 0; w <= last/64; w++ {
		m := base[w]
		for k := 0; k < len(s.fields) && m != 0; k++ {
			m &= s.fields[k].word(w)
		}
		if i := t.confirm(f, w, m, last); i >= 0 {
			return i
		}
	}
	return best
}

// confirm returns the first rule of word w's candidates m (none past last) that matches.
func (t *Table) confirm(f *flow, w int, m uint64, last int) int {
	if w == last/64 {
		m &= ^uint64(0) >> (63 - last%64)
	}
	for m != 0 {
		i := w*64 + bits.TrailingZeros64(m)
		if t.rules[i].mismatch(f) == "" {
			return i
		}
		m &= m - 1
	}
	return -1
}

// candidate reports whether rule i, which field k's matches list, passes every other field's
// index: the fields that constrain it list it too.
func (t *Table) candidate(all []fieldState, k int, i uint32) bool {
	for m := t.constrained[i] &^ (1 << k); m != 0; m &= m - 1 {
		if !all[bits.TrailingZeros8(m)].listed(i) {
			return false
		}
	}
	return true
}

// listed reports whether the field's matches hold rule i.
func (st *fieldState) listed(i uint32) bool {
	bit := uint64(1) << (i & 63)
	for _, d := range st.dense {
		if d[i>>6]&bit != 0 {
			return true
		}
	}
	for _, c := range st.sparse {
		if _, ok := slices.BinarySearch(c.list, i); ok {
			return true
		}
	}
	return false
}

// word returns word w of the field's candidate set. Calls must come with w never decreasing;
// words skipped in between are skipped by the sparse cursors too.
func (st *fieldState) word(w int) uint64 {
	x := st.wild[w]
	for _, d := range st.dense {
		x |= d[w]
	}
	for j := range st.sparse {
		c := &st.sparse[j]
		for c.pos < len(c.list) && int(c.list[c.pos]>>6) <= w {
			if i := c.list[c.pos]; int(i>>6) == w {
				x |= 1 << (i & 63)
			}
			c.pos++
		}
	}
	return x
}

// builder compiles the per-field indexes.
type builder struct {
	words int
}

func (b *builder) bitset() []uint64 { return make([]uint64, b.words) }

// makeSet stores a sorted, duplicate-free list of rule indexes as a list or a bitset,
// whichever is smaller.
func (b *builder) makeSet(list []uint32) set {
	if len(list) == 0 {
		return set{}
	}
	if len(list) > b.words {
		d := b.bitset()
		for _, i := range list {
			d[i/64] |= 1 << (i % 64)
		}
		return set{dense: d}
	}
	return set{list: slices.Clip(list)}
}

// wildOf returns the rules for which open(r) is true, or nil when no rule constrains the
// field (then the field needs no index).
func (b *builder) wildOf(rs []Rule, open func(*Rule) bool) []uint64 {
	w := b.bitset()
	constrained := false
	for i := range rs {
		if open(&rs[i]) {
			w[i/64] |= 1 << (i % 64)
		} else {
			constrained = true
		}
	}
	if !constrained {
		return nil
	}
	return w
}

func popcount(b []uint64) int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

func dedupe(l []uint32) []uint32 {
	slices.Sort(l)
	return slices.Compact(l)
}

func (b *builder) network(rs []Rule) *fieldIndex {
	open := b.wildOf(rs, func(r *Rule) bool { return r.Network == AnyNetwork })
	if open == nil {
		return nil
	}
	var lists [3][]uint32
	for i := range rs {
		if n := rs[i].Network; n != AnyNetwork {
			lists[n] = append(lists[n], uint32(i))
		}
	}
	x := &fieldIndex{field: FieldNetwork, open: open}
	for n, l := range lists {
		x.net[n] = b.makeSet(l)
	}
	return x
}

func (b *builder) cagedField(rs []Rule) *fieldIndex {
	open := b.wildOf(rs, func(r *Rule) bool { return !r.Caged })
	if open == nil {
		return nil
	}
	var l []uint32
	for i := range rs {
		if rs[i].Caged {
			l = append(l, uint32(i))
		}
	}
	return &fieldIndex{field: FieldCaged, open: open, caged: b.makeSet(l)}
}

func (b *builder) apps(rs []Rule) *fieldIndex {
	// A rule whose apps are all literal names or paths is indexed by them; a rule with a glob
	// is filed as open and confirmed by its matcher.
	indexable := func(r *Rule) bool {
		for _, a := range r.Apps {
			if !a.literal {
				return false
			}
		}
		return len(r.Apps) > 0
	}
	open := b.wildOf(rs, func(r *Rule) bool { return !indexable(r) })
	if open == nil {
		return nil
	}
	names, paths := map[string][]uint32{}, map[string][]uint32{}
	for i := range rs {
		if !indexable(&rs[i]) {
			continue
		}
		for _, a := range rs[i].Apps {
			if a.path {
				paths[a.pattern] = append(paths[a.pattern], uint32(i))
			} else {
				names[a.pattern] = append(names[a.pattern], uint32(i))
			}
		}
	}
	return &fieldIndex{field: FieldApps, open: open, exact: b.makeNames(names), other: b.makeNames(paths)}
}

func (b *builder) services(rs []Rule) *fieldIndex {
	open := b.wildOf(rs, func(r *Rule) bool { return len(r.Services) == 0 })
	if open == nil {
		return nil
	}
	lists := map[string][]uint32{}
	for i := range rs {
		for _, s := range rs[i].Services {
			lists[s] = append(lists[s], uint32(i))
		}
	}
	return &fieldIndex{field: FieldServices, open: open, exact: b.makeNames(lists)}
}

// intervals maps a point to the rules whose ranges hold it: the axis is cut into elementary
// intervals at every range boundary, each with its set.
type intervals struct {
	starts []netaddr.Key // starts[i] begins interval i; interval i ends where i+1 begins
	sets   []set
	// The starts inside one band of 2^32 keys that share their upper 96 bits (the IPv4
	// addresses, or the ports), as their low 32 bits: a point in the band is searched there,
	// in a quarter of the memory and with one comparison a step. band is the band's first
	// key and bandAt the index in starts of its first start.
	band   netaddr.Key
	bandAt int
	band32 []uint32
}

// bandIPv4 and bandPort are the bands of intervals: the IPv4 addresses (::ffff:0.0.0.0 on),
// and the ports (from 0).
func bandIPv4() netaddr.Key { return netaddr.Key{Lo: 0xffff << 32} }
func bandPort() netaddr.Key { return netaddr.Key{} }

// lookup appends the set of the interval that holds p, if it has rules.
func (iv *intervals) lookup(p netaddr.Key, parts []set) []set {
	if p.Hi == iv.band.Hi && p.Lo>>32 == iv.band.Lo>>32 {
		return iv.lookupBand(uint32(p.Lo), parts)
	}
	starts := iv.starts
	if len(starts) == 0 || p.Less(starts[0]) {
		return parts
	}
	// The last start <= p, by a search without branches on the keys (a mispredicted branch
	// at every step costs more than the step): starts[base] <= p throughout.
	base, n := 0, len(starts)
	for n > 1 {
		half := n >> 1
		s := &starts[base+half]
		_, borrow := bits.Sub64(p.Lo, s.Lo, 0)
		_, borrow = bits.Sub64(p.Hi, s.Hi, borrow) // 1 when p < s
		base += half & int(borrow-1)
		n -= half
	}
	return iv.appendSet(base, parts)
}

// lookupAddr is lookup of an address (unmapped); an IPv4 one skips the 128-bit key.
func (iv *intervals) lookupAddr(a netip.Addr, parts []set) []set {
	if a.Is4() && iv.band == bandIPv4() {
		b := a.As4()
		return iv.lookupBand(binary.BigEndian.Uint32(b[:]), parts)
	}
	return iv.lookup(netaddr.KeyOf(a), parts)
}

// lookupBand is lookup of a point in the band, by its low 32 bits.
func (iv *intervals) lookupBand(p uint32, parts []set) []set {
	b := iv.band32
	if len(b) == 0 || p < b[0] {
		return iv.appendSet(iv.bandAt-1, parts) // the last start below the band, if any
	}
	if p >= b[len(b)-1] {
		// Past the last start, as a flow to an address or port no rule lists mostly is.
		return iv.appendSet(iv.bandAt+len(b)-1, parts)
	}
	base, n := 0, len(b)
	for n > 1 {
		half := n >> 1
		_, borrow := bits.Sub32(p, b[base+half], 0) // 1 when p < b[base+half]
		base += half & (int(borrow) - 1)
		n -= half
	}
	return iv.appendSet(iv.bandAt+base, parts)
}

// appendSet appends the set of interval i (none when i < 0), if it has rules.
func (iv *intervals) appendSet(i int, parts []set) []set {
	if i >= 0 && !iv.sets[i].empty() {
		parts = append(parts, iv.sets[i])
	}
	return parts
}

type span struct {
	lo, hi netaddr.Key
	rule   uint32
}

// intervals indexes inclusive spans, with the starts in band (bandIPv4, bandPort) also in
// 32 bits; it returns nil when there are none.
func (b *builder) intervals(spans []span, band netaddr.Key) *intervals {
	if len(spans) == 0 {
		return nil
	}
	var cuts []netaddr.Key
	for _, s := range spans {
		cuts = append(cuts, s.lo)
		if n, ok := s.hi.Next(); ok {
			cuts = append(cuts, n)
		}
	}
	slices.SortFunc(cuts, netaddr.Key.Compare)
	cuts = slices.Compact(cuts)
	find := func(p netaddr.Key) int {
		i, _ := slices.BinarySearchFunc(cuts, p, netaddr.Key.Compare)
		return i
	}
	lists := make([][]uint32, len(cuts))
	for _, s := range spans {
		end := len(cuts)
		if n, ok := s.hi.Next(); ok {
			end = find(n)
		}
		for i := find(s.lo); i < end; i++ {
			lists[i] = append(lists[i], s.rule)
		}
	}
	iv := &intervals{starts: cuts, sets: make([]set, len(cuts)), band: band}
	for i, l := range lists {
		iv.sets[i] = b.makeSet(dedupe(l))
	}
	iv.bandAt = find(band)
	for _, c := range cuts[iv.bandAt:] {
		if c.Hi != band.Hi || c.Lo>>32 != band.Lo>>32 {
			break
		}
		iv.band32 = append(iv.band32, uint32(c.Lo))
	}
	return iv
}

func (b *builder) sources(rs []Rule) *fieldIndex {
	open := b.wildOf(rs, func(r *Rule) bool { return len(r.Sources) == 0 })
	if open == nil {
		return nil
	}
	var spans []span
	for i := range rs {
		for _, r := range rs[i].Sources {
			spans = append(spans, span{netaddr.KeyOf(r.Lo), netaddr.KeyOf(r.Hi), uint32(i)})
		}
	}
	return &fieldIndex{field: FieldSources, open: open, iv: b.intervals(spans, bandIPv4())}
}

func (b *builder) ports(rs []Rule) *fieldIndex {
	open := b.wildOf(rs, func(r *Rule) bool { return len(r.Ports) == 0 })
	if open == nil {
		return nil
	}
	var spans []span
	for i := range rs {
		for _, p := range rs[i].Ports {
			spans = append(spans, span{netaddr.Key{Lo: uint64(p.Lo)}, netaddr.Key{Lo: uint64(p.Hi)}, uint32(i)})
		}
	}
	return &fieldIndex{field: FieldPorts, open: open, iv: b.intervals(spans, bandPort())}
}

func (b *builder) hosts(rs []Rule) *fieldIndex {
	open := b.wildOf(rs, func(r *Rule) bool { return len(r.Hosts) == 0 })
	if open == nil {
		return nil
	}
	var spans []span
	names := map[string][]uint32{}
	suffixes := map[string][]uint32{}
	for i := range rs {
		for _, h := range rs[i].Hosts {
			switch h.Kind {
			case HostRange:
				spans = append(spans, span{netaddr.KeyOf(h.Range.Lo), netaddr.KeyOf(h.Range.Hi), uint32(i)})
			case HostName:
				names[h.Name] = append(names[h.Name], uint32(i))
			case HostSuffix:
				suffixes[h.Name] = append(suffixes[h.Name], uint32(i))
			}
		}
	}
	return &fieldIndex{field: FieldHosts, open: open, iv: b.intervals(spans, bandIPv4()), exact: b.makeNames(names), other: b.makeNames(suffixes)}
}
