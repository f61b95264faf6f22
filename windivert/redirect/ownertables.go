package redirect

import (
	"net/netip"
	"sync"
)

// ownerTables serves owner lookups from dumps of the host's socket tables (the IP Helper
// tables on Windows), which cost the same for one socket as for all of them. A lookup waits
// for a dump that starts after it was asked (its socket must be in it); every lookup that
// waits when a dump starts is answered by that one dump, and a dump reads the IPv4 and the
// IPv6 table together: a dual-stack socket sends IPv4 packets but sits in the IPv6 table
// (as ::ffff:a.b.c.d, or [::] when bound to any address). It is safe for concurrent use;
// mu guards st.
type ownerTables struct {
	dump func(udp bool) ([]socketRow, error) // both families' rows of one protocol

	mu sync.Mutex
	st [2]tableState // TCP, UDP
}

type tableState struct {
	running bool       // a dump is in progress
	next    *tableCall // the dump the lookups asked since then wait for; nil: none asked
	waiting int        // lookups waiting for a dump (tests)
}

type tableCall struct {
	done chan struct{}
	rows []socketRow
	err  error
}

// rows returns a dump of the protocol's tables made after the call began.
func (t *ownerTables) rows(udp bool) ([]socketRow, error) {
	i := 0
	if udp {
		i = 1
	}
	t.mu.Lock()
	s := &t.st[i]
	if s.next == nil {
		s.next = &tableCall{done: make(chan struct{})}
	}
	c := s.next
	if !s.running {
		t.startLocked(i)
	}
	s.waiting++
	t.mu.Unlock()
	<-c.done
	t.mu.Lock()
	s.waiting--
	t.mu.Unlock()
	return c.rows, c.err
}

// startLocked starts the dump the waiting lookups of protocol i wait for; t.mu is held.
func (t *ownerTables) startLocked(i int) {
	s := &t.st[i]
	c := s.next
	s.next, s.running = nil, true
	go func() {
		c.rows, c.err = t.dump(i == 1)
		close(c.done)
		t.mu.Lock()
		defer t.mu.Unlock()
		s.running = false
		if s.next != nil {
			t.startLocked(i)
		}
	}()
}

// owner returns the PID of the socket local -> remote (remote is ignored for UDP).
func (t *ownerTables) owner(udp bool, local, remote netip.AddrPort) (uint32, bool, error) {
	rows, err := t.rows(udp)
	if err != nil {
		return 0, false, err
	}
	pid, ok := findOwner(rows, udp, unmapAP(local), unmapAP(remote))
	return pid, ok, nil
}
