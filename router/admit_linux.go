package router

import "time"

// The loops' set-up (loop_setup_linux.go) takes its slots without waiting; a flow that would
// wait takes the goroutine path (setup).

// trySetup takes a set-up slot of source key and one of destination dst, if both are free
// now and nobody waits for a slot (waiters are served first); false: nothing is taken, and
// the flow must wait (setup) on a goroutine of its own. endSetup gives them back.
func (a *admission) trySetup(key string, dst dstKey) bool {
	if !a.dstTryAcquire(dst) {
		return false
	}
	if !a.setups.tryAcquireNow(key) {
		a.dstRelease(dst, time.Time{})
		return false
	}
	return true
}

// tryAcquireNow takes a slot for key when acquire would take one without waiting: one is
// free within key's share and nobody waits (waiters go first).
func (s *shares) tryAcquireNow(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) != 0 || !s.grantableLocked(key) {
		return false
	}
	s.takeLocked(key)
	return true
}
