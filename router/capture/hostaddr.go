package capture

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// HostAddrs knows this machine's own addresses, for policy.Env.HostAddr (both captures). The interface list is read on the first
// question and read again on a miss, at most once per refresh period, so an address added
// since is found within a period and asking costs a map lookup. It is safe for concurrent
// use; a hit takes no lock.
type HostAddrs struct {
	List    func() ([]netip.Addr, error) // nil: the interfaces' addresses
	Refresh time.Duration                // 0: one second
	Now     func() time.Time             // nil: time.Now

	cur  atomic.Pointer[map[netip.Addr]struct{}] // the last set read
	mu   sync.Mutex                              // serialises reads of the list; guards read
	read time.Time
}

// Has reports whether a is one of this machine's addresses (IPv4-mapped is judged as IPv4).
func (h *HostAddrs) Has(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if set := h.cur.Load(); set != nil {
		if _, ok := (*set)[a]; ok {
			return true
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	every := h.Refresh
	if every == 0 {
		every = time.Second
	}
	if t := now(); h.cur.Load() == nil || t.Sub(h.read) >= every {
		h.read = t
		h.load()
	}
	_, ok := (*h.cur.Load())[a]
	return ok
}

// load reads the list; it is called with h.mu held.
func (h *HostAddrs) load() {
	list := h.List
	if list == nil {
		list = interfaceAddrs
	}
	addrs, err := list()
	if err != nil && h.cur.Load() != nil {
		return // keep what was known
	}
	set := make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		set[a.Unmap().WithZone("")] = struct{}{}
	}
	h.cur.Store(&set)
}

// interfaceAddrs lists the addresses of every interface of this machine.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}
