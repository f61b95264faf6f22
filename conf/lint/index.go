package lint

import (
	"iter"
	"slices"
	"strings"

	"github.com/agentcage/router/internal/netaddr"
)

// The shadowing checks compare each rule with the rules above it, but only an earlier rule
// whose box overlaps the later one's can take any of its flows: an index of the boxes by
// field finds those, so that the checks cost the number of rules times a log, plus the
// pairs that do overlap, rather than the square of the number of rules.
//
// A box is indexed on the fields that narrow most (hosts, ports, sources). Rules are grouped
// by which of these three they constrain; for a later rule and a group, one field that both
// constrain is looked up in the group's index of that field, and when they share none, every
// rule of the group is a candidate. The candidates are a superset of the overlapping earlier
// rules (the checks test each one as before), so what is found does not change: the test
// compares with the plain loop over every earlier rule.

// Fields a group of rules may constrain.
const (
	fieldHosts = 1 << iota
	fieldPorts
	fieldSrc
	fieldsAll = fieldHosts | fieldPorts | fieldSrc
)

// boxIndex finds, for a box, the earlier boxes that may overlap it.
type boxIndex struct {
	boxes  []box
	groups [fieldsAll + 1]group
	// stamp marks the rules already returned for the current query (stamp[i] == query).
	stamp []int32
	query int32
}

// group holds the rules that constrain exactly the fields in its mask.
type group struct {
	rules      []int32 // in rule order
	hosts      hostIndex
	ports, src ivIndex
}

func fieldsOf(b *box) int {
	f := 0
	if b.hosts != nil {
		f |= fieldHosts
	}
	if b.ports != nil {
		f |= fieldPorts
	}
	if b.src != nil {
		f |= fieldSrc
	}
	return f
}

func newBoxIndex(boxes []box) *boxIndex {
	x := &boxIndex{boxes: boxes, stamp: make([]int32, len(boxes))}
	for i := range boxes {
		b := &boxes[i]
		g := &x.groups[fieldsOf(b)]
		g.rules = append(g.rules, int32(i))
		if b.hosts != nil {
			g.hosts.add(int32(i), b.hosts)
		}
		if b.ports != nil {
			g.ports.add(int32(i), b.ports)
		}
		if b.src != nil {
			g.src.add(int32(i), b.src)
		}
	}
	for m := range x.groups {
		g := &x.groups[m]
		g.hosts.addrs.build()
		g.ports.build()
		g.src.build()
	}
	return x
}

// earlier yields, in rule order, the rules before j whose boxes may overlap box j and whose
// group (the fields it constrains, see fieldsOf) passes keep: every such rule that does
// overlap, and maybe some that do not. It looks a group up in the index of a field that
// the group and box j both constrain, or else takes the group whole; the caller may stop
// early, and pays for what it takes.
func (x *boxIndex) earlier(j int, keep func(fields int) bool) iter.Seq[int] {
	return func(yield func(int) bool) {
		x.query++
		b := &x.boxes[j]
		want := fieldsOf(b)
		var runs [][]int32 // sorted runs of candidates, one for each group
		var found []int32
		take := func(i int32) {
			if int(i) < j && x.stamp[i] != x.query {
				x.stamp[i] = x.query
				found = append(found, i)
			}
		}
		for m := range x.groups {
			g := &x.groups[m]
			if len(g.rules) == 0 || !keep(m) {
				continue
			}
			found = nil
			switch shared := m & want; {
			case shared&fieldHosts != 0:
				g.hosts.overlapping(b.hosts, take)
			case shared&fieldPorts != 0:
				g.ports.overlapping(b.ports, take)
			case shared&fieldSrc != 0:
				g.src.overlapping(b.src, take)
			default:
				n, _ := slices.BinarySearch(g.rules, int32(j))
				runs = append(runs, g.rules[:n])
				continue
			}
			slices.Sort(found)
			runs = append(runs, found)
		}
		// Merge the runs (a handful) in rule order.
		for {
			best := -1
			for r, run := range runs {
				if len(run) > 0 && (best < 0 || run[0] < runs[best][0]) {
					best = r
				}
			}
			if best < 0 {
				return
			}
			i := runs[best][0]
			runs[best] = runs[best][1:]
			if !yield(int(i)) {
				return
			}
		}
	}
}

// Which groups each check needs. A rule that constrains hosts subtracts nothing from one
// that does not (minus needs the names covered whole), and a rule narrower on hosts or
// ports than a later one never takes every one of its destinations (partly-shadowed).
func subtractors(j *box) func(int) bool {
	return func(m int) bool { return m&fieldHosts == 0 || j.hosts != nil }
}

func destCovers(j *box) func(int) bool {
	return func(m int) bool {
		return (m&fieldHosts == 0 || j.hosts != nil) && (m&fieldPorts == 0 || j.ports != nil)
	}
}

func anyGroup(int) bool { return true }

// ivIndex finds the rules one of whose intervals meets a query interval: a static
// interval tree (intervals sorted by start, each subtree knowing its greatest end).
type ivIndex struct {
	ivs   []ruleIv
	maxHi []netaddr.Key // of the subtree rooted at each position of the implicit tree
}

type ruleIv struct {
	iv
	rule int32
}

func (t *ivIndex) add(rule int32, s *ivset) {
	for _, v := range s.ivs {
		t.ivs = append(t.ivs, ruleIv{v, rule})
	}
}

func (t *ivIndex) build() {
	if len(t.ivs) == 0 {
		return
	}
	slices.SortFunc(t.ivs, func(a, b ruleIv) int { return a.lo.Compare(b.lo) })
	t.maxHi = make([]netaddr.Key, len(t.ivs))
	t.fill(0, len(t.ivs))
}

// fill sets maxHi for the subtree over ivs[lo:hi], whose root is its middle.
func (t *ivIndex) fill(lo, hi int) netaddr.Key {
	mid := int(uint(lo+hi) >> 1)
	m := t.ivs[mid].hi
	if lo < mid {
		if l := t.fill(lo, mid); l.Compare(m) > 0 {
			m = l
		}
	}
	if mid+1 < hi {
		if r := t.fill(mid+1, hi); r.Compare(m) > 0 {
			m = r
		}
	}
	t.maxHi[mid] = m
	return m
}

func (t *ivIndex) overlapping(s *ivset, visit func(int32)) {
	for _, q := range s.ivs {
		t.visit(0, len(t.ivs), q, visit)
	}
}

func (t *ivIndex) visit(lo, hi int, q iv, visit func(int32)) {
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.maxHi[mid].Compare(q.lo) < 0 {
			return // nothing in this subtree ends at or after the query's start
		}
		t.visit(lo, mid, q, visit)
		v := t.ivs[mid]
		if v.lo.Compare(q.hi) > 0 {
			return // this one and everything after it starts past the query's end
		}
		if v.hi.Compare(q.lo) >= 0 {
			visit(v.rule)
		}
		lo = mid + 1
	}
}

// hostIndex finds the rules whose hosts overlap a host set, as hostSet.overlaps decides:
// addresses that meet, a name equal to a name or under a suffix, suffixes one under the
// other.
type hostIndex struct {
	addrs ivIndex
	// names and suffixes by their text; nameUnder and sufUnder by each of the shorter
	// suffixes they end with ("a.b.c" under "b.c" and "c").
	names, suffixes, nameUnder, sufUnder map[string][]int32
}

func (h *hostIndex) add(rule int32, s *hostSet) {
	if h.names == nil {
		h.names, h.suffixes = map[string][]int32{}, map[string][]int32{}
		h.nameUnder, h.sufUnder = map[string][]int32{}, map[string][]int32{}
	}
	h.addrs.add(rule, s.addrs)
	for _, n := range s.names {
		h.names[n] = append(h.names[n], rule)
		forSuffixes(n, func(sfx string) { h.nameUnder[sfx] = append(h.nameUnder[sfx], rule) })
	}
	for _, n := range s.suffixes {
		h.suffixes[n] = append(h.suffixes[n], rule)
		forSuffixes(n, func(sfx string) { h.sufUnder[sfx] = append(h.sufUnder[sfx], rule) })
	}
}

// forSuffixes calls f with each shorter name n ends with: "b.c" and "c" for "a.b.c".
func forSuffixes(n string, f func(string)) {
	for i := strings.IndexByte(n, '.'); i >= 0; {
		f(n[i+1:])
		j := strings.IndexByte(n[i+1:], '.')
		if j < 0 {
			return
		}
		i += 1 + j
	}
}

func (h *hostIndex) overlapping(s *hostSet, visit func(int32)) {
	h.addrs.overlapping(s.addrs, visit)
	if h.names == nil {
		return
	}
	each := func(rs []int32) {
		for _, r := range rs {
			visit(r)
		}
	}
	for _, n := range s.names {
		each(h.names[n])                                       // the same name
		forSuffixes(n, func(x string) { each(h.suffixes[x]) }) // a suffix over it
	}
	for _, n := range s.suffixes {
		each(h.nameUnder[n])                                   // a name under it
		each(h.suffixes[n])                                    // the same suffix
		each(h.sufUnder[n])                                    // a suffix under it
		forSuffixes(n, func(x string) { each(h.suffixes[x]) }) // a suffix over it
	}
}
