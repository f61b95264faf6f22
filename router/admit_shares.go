package router

import (
	"context"
	"errors"
	"sync"
)

// shares is a counting semaphore of capacity slots shared fairly between sources (a VM
// address, an app): a source may hold at most its share, (capacity-headroom)/n slots for n
// sources holding or waiting (never less than minShare), so that headroom slots are left
// for one more source unless the whole capacity is taken. A source that holds its share waits (or is
// refused, with tryAcquire) even while slots are free; waiters are served first come, first
// served among those under their share. A source holding more than its share (it took them
// while it was alone) keeps them and gets no more until it is under.
//
// The zero value is not usable; see newShares. mu guards every field below it; safe for
// concurrent use.
type shares struct {
	capacity   int
	headroom   int
	minShare   int
	maxWaiting int // per source; more are refused at once

	mu      sync.Mutex
	used    int
	sources map[string]*source // sources holding or waiting
	queue   []*waiter          // in arrival order
}

type source struct{ held, waiting int }

type waiter struct {
	key   string
	ready chan struct{} // closed when the slot is granted
}

// errBusy is a source that has its share and as many flows waiting as it may.
var errBusy = errors.New("its source has its share of flows being set up and too many waiting")

func newShares(capacity, headroom, minShare, maxWaiting int) *shares {
	return &shares{capacity: capacity, headroom: min(headroom, capacity-1), minShare: min(minShare, capacity),
		maxWaiting: maxWaiting, sources: map[string]*source{}}
}

// shareLocked is key's share now (key counted among the sources); s.mu is held.
func (s *shares) shareLocked(key string) int {
	n := len(s.sources)
	if _, ok := s.sources[key]; !ok {
		n++
	}
	return max(s.minShare, (s.capacity-s.headroom)/n)
}

func (s *shares) grantableLocked(key string) bool {
	if s.used >= s.capacity {
		return false
	}
	held := 0
	if src := s.sources[key]; src != nil {
		held = src.held
	}
	return held < s.shareLocked(key)
}

func (s *shares) takeLocked(key string) {
	src := s.sources[key]
	if src == nil {
		src = &source{}
		s.sources[key] = src
	}
	src.held++
	s.used++
}

// tryAcquire takes a slot for key if one is free within its share; it never waits (use it
// on a shares nobody waits on).
func (s *shares) tryAcquire(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.grantableLocked(key) {
		return false
	}
	s.takeLocked(key)
	return true
}

// acquire takes a slot for key, waiting (first come, first served among the sources under
// their share) until one is free or ctx ends. It returns errBusy at once when key already
// has maxWaiting flows waiting, and ctx.Err() when the wait ran out.
func (s *shares) acquire(ctx context.Context, key string) error {
	s.mu.Lock()
	src := s.sources[key]
	if len(s.queue) == 0 && s.grantableLocked(key) {
		s.takeLocked(key)
		s.mu.Unlock()
		return nil
	}
	if src == nil {
		src = &source{}
		s.sources[key] = src
	}
	if src.waiting >= s.maxWaiting {
		s.dropLocked(key)
		s.mu.Unlock()
		return errBusy
	}
	w := &waiter{key: key, ready: make(chan struct{})}
	src.waiting++
	s.queue = append(s.queue, w)
	s.grantLocked() // key may be grantable although others wait
	s.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile: give it back
		s.releaseLocked(key)
	default:
		for i, q := range s.queue {
			if q == w {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				break
			}
		}
		s.sources[key].waiting--
		s.dropLocked(key)
		s.grantLocked() // the sources counted one fewer: shares grew
	}
	return ctx.Err()
}

// release gives back a slot of key.
func (s *shares) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(key)
}

func (s *shares) releaseLocked(key string) {
	src := s.sources[key]
	if src == nil || src.held == 0 {
		panic("router: shares released more than acquired for " + key)
	}
	src.held--
	s.used--
	s.dropLocked(key)
	s.grantLocked()
}

// dropLocked forgets key when it holds and waits for nothing.
func (s *shares) dropLocked(key string) {
	if src := s.sources[key]; src != nil && src.held == 0 && src.waiting == 0 {
		delete(s.sources, key)
	}
}

// grantLocked gives free slots to the waiters that may have them, oldest first.
func (s *shares) grantLocked() {
	for i := 0; i < len(s.queue) && s.used < s.capacity; {
		w := s.queue[i]
		if !s.grantableLocked(w.key) {
			i++
			continue
		}
		s.queue = append(s.queue[:i], s.queue[i+1:]...)
		s.sources[w.key].waiting--
		s.takeLocked(w.key)
		close(w.ready)
	}
}

// stats returns the slots in use, the sources holding or waiting and the flows waiting.
func (s *shares) stats() (used, sources, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, len(s.sources), len(s.queue)
}
