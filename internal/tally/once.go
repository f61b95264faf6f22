package tally

import (
	"sync"
	"sync/atomic"
)

// MaxOnce bounds the keys a Once remembers; past it every key counts as new (logged again
// rather than remembered without bound).
const MaxOnce = 4096

// Once remembers which keys were seen, so that an event is logged once per key however often
// it happens (a canary: once per credential, source and destination). The zero Once is
// ready; it is safe for concurrent use.
type Once struct {
	seen sync.Map
	n    atomic.Int64
}

// First reports whether key is seen for the first time (then the caller logs it).
func (o *Once) First(key string) bool {
	if _, seen := o.seen.Load(key); seen {
		return false
	}
	if o.n.Add(1) <= MaxOnce {
		if _, seen := o.seen.LoadOrStore(key, true); seen {
			return false
		}
	}
	return true
}
