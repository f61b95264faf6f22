package platform

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ifaceNet is one interface's name and the subnets of its addresses.
type ifaceNet struct {
	name string
	nets []netip.Prefix
}

// guestNets knows the subnets of this machine's interfaces, for policy.Env.GuestNet: an
// address inside the subnet of a VM-facing interface is a guest's. The list is read on the
// first question and again when it is older than the refresh period, so an interface or
// address that appears is known within a period. It is safe for concurrent use; a question
// takes no lock but when the list is due (one caller reads it, the others use the old one).
type guestNets struct {
	list    func() ([]ifaceNet, error) // nil: this machine's interfaces
	refresh time.Duration              // 0: one second
	now     func() time.Time           // nil: time.Now

	cur  atomic.Pointer[[]ifaceNet] // the last list read
	read atomic.Int64               // when it was read, in Unix nanoseconds
	mu   sync.Mutex                 // serialises reads of the list
}

// Has reports whether a is inside the subnet of an interface whose name matches one of
// ifaces (a trailing * matches any suffix). A list that cannot be read keeps what was known.
func (g *guestNets) Has(ifaces []string, a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	now := time.Now
	if g.now != nil {
		now = g.now
	}
	every := g.refresh
	if every == 0 {
		every = time.Second
	}
	t := now()
	if cur := g.cur.Load(); cur == nil {
		g.mu.Lock() // the first question waits for the first list
		g.load(t)
		g.mu.Unlock()
	} else if t.UnixNano()-g.read.Load() >= int64(every) && g.mu.TryLock() {
		g.load(t)
		g.mu.Unlock()
	}
	cur := g.cur.Load()
	if cur == nil {
		return false
	}
	for _, ifc := range *cur {
		if !matchIface(ifaces, ifc.name) {
			continue
		}
		for _, n := range ifc.nets {
			if n.Contains(a) {
				return true
			}
		}
	}
	return false
}

// load reads the list at time t, unless another caller has since; g.mu is held.
func (g *guestNets) load(t time.Time) {
	if g.cur.Load() != nil && t.UnixNano() < g.read.Load() {
		return
	}
	g.read.Store(t.UnixNano())
	list := g.list
	if list == nil {
		list = interfaceNets
	}
	if l, err := list(); err == nil {
		g.cur.Store(&l)
	} else if g.cur.Load() == nil {
		g.cur.Store(&[]ifaceNet{})
	}
}

// matchIface reports whether name matches one of patterns (a trailing * matches any suffix).
func matchIface(patterns []string, name string) bool {
	for _, p := range patterns {
		if base, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(name, base) || p == name {
			return true
		}
	}
	return false
}

// interfaceNets lists this machine's interfaces with their subnets (a host route, /32 or
// /128, is a subnet of one address).
func interfaceNets() ([]ifaceNet, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]ifaceNet, 0, len(ifs))
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		in := ifaceNet{name: ifc.Name}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				in.nets = append(in.nets, netip.PrefixFrom(p.Addr().Unmap().WithZone(""), p.Bits()).Masked())
			}
		}
		out = append(out, in)
	}
	return out, nil
}
