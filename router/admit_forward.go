package router

// forwardAdmission bounds the forwards' connections (the listen sockets' and the gated
// caged flows', forward_gate.go): capacity in all, shared fairly between the guests of each
// forward (shares, keyed by the forward and the guest: see guestOf and forwardGuest; an
// eighth kept for one not yet seen), so that one guest's idle connections cannot take
// another guest's forward, nor its own forward from another guest, however many addresses
// it uses. Safe for concurrent use.
type forwardAdmission struct {
	s *shares
}

func newForwardAdmission(capacity int) *forwardAdmission {
	return &forwardAdmission{s: newShares(capacity, max(capacity/8, 2), 2, 0)}
}

func forwardKey(forward, guest string) string { return "forward " + forward + ": " + guest }

// forwardTake admits a connection of guest to the forward named forward, or reports false
// when the guest holds its share of that forward's. Each admitted connection is given back
// once with forwardGive.
func (a *admission) forwardTake(forward, guest string) bool {
	return a.forwards.s.tryAcquire(forwardKey(forward, guest))
}

func (a *admission) forwardGive(forward, guest string) {
	a.forwards.s.release(forwardKey(forward, guest))
}
