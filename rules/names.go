package rules

import "math/bits"

// names maps normalized text (host names, suffixes, app names, paths, services) to rule sets.
// It is asked with a flow's text (see flow), folded byte by byte as it is hashed and compared,
// so that a lookup builds no key and allocates nothing; and a host name's suffixes are all
// hashed in one pass from its end (suffixes). The hash is read from the right: the hash of a
// text is the hash of its last label extended to the left.
//
// It is an open-addressing table, built once by Compile and never written after, at most half
// full: a lookup probes a run of occupied slots, whose lengths depend only on the rules' own
// keys (a query cannot add one), and compares a key's text only when its full hash agrees.
type names struct {
	slots   []nameSlot // len a power of two, or nil when there are no keys
	entries []nameEntry
}

type nameSlot struct {
	hash  uint64
	entry uint32 // index into entries, plus one; 0 for a free slot
}

type nameEntry struct {
	key string
	set set
}

// The hash: FNV-1a over the bytes from the last to the first, then a mix (mixHash) so
// that the low bits the table uses depend on every byte.
const (
	hashSeed  = 14695981039346656037
	hashPrime = 1099511628211
)

func hashByte(h uint64, c byte) uint64 { return (h ^ uint64(c)) * hashPrime }

func mixHash(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// hashText hashes a normalized text (a key), or a flow's text folded by fold.
func hashText(s string, path bool) uint64 {
	h := uint64(hashSeed)
	for i := len(s) - 1; i >= 0; i-- {
		h = hashByte(h, foldByte(s[i], path))
	}
	return mixHash(h)
}

// makeNames builds the table of the keys' sets.
func (b *builder) makeNames(lists map[string][]uint32) names {
	if len(lists) == 0 {
		return names{}
	}
	n := names{slots: make([]nameSlot, 1<<bits.Len(uint(2*len(lists)-1)))}
	mask := uint64(len(n.slots) - 1)
	for k, l := range lists {
		n.entries = append(n.entries, nameEntry{key: k, set: b.makeSet(dedupe(l))})
		h := hashText(k, false) // keys are normalized: folding changes nothing
		i := h & mask
		for n.slots[i].entry != 0 {
			i = (i + 1) & mask
		}
		n.slots[i] = nameSlot{hash: h, entry: uint32(len(n.entries))}
	}
	return n
}

// find returns the set of the key that the flow's text s folds to (pathByte when path, else
// lowerByte), h being hashText(s, path).
func (n *names) find(h uint64, s string, path bool) (set, bool) {
	if n.slots == nil {
		return set{}, false
	}
	mask := uint64(len(n.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &n.slots[i]
		if sl.entry == 0 {
			return set{}, false
		}
		if sl.hash != h {
			continue
		}
		e := &n.entries[sl.entry-1]
		if equalFolded(s, e.key, path) {
			return e.set, true
		}
	}
}

// appendText appends the set of the key that the flow's text s folds to, if any.
func (n *names) appendText(parts []set, s string, path bool) []set {
	if n.slots == nil {
		return parts
	}
	if st, ok := n.find(hashText(s, path), s, path); ok {
		parts = append(parts, st)
	}
	return parts
}

// appendHost appends the set of the flow's host name in exact and the sets of its proper
// suffixes after a dot in suffixes (a.b.c: b.c and c), hashing the name once from its end.
func appendHost(parts []set, exact, suffixes *names, host string) []set {
	h := uint64(hashSeed)
	for i := len(host) - 1; i >= 0; i-- {
		c := host[i]
		if c == '.' && suffixes.slots != nil {
			if st, ok := suffixes.find(mixHash(h), host[i+1:], false); ok {
				parts = append(parts, st)
			}
		}
		h = hashByte(h, lowerByte(c))
	}
	if st, ok := exact.find(mixHash(h), host, false); ok {
		parts = append(parts, st)
	}
	return parts
}
