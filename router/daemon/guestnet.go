package daemon

import (
	"net"
	"net/netip"
	"strings"
	"sync"
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
// address that appears is known within a period. It is safe for concurrent use.
type guestNets struct {
	list    func() ([]ifaceNet, error) // nil: this machine's interfaces
	refresh time.Duration              // 0: one second
	now     func() time.Time           // nil: time.Now

	mu   sync.Mutex // guards the fields below
	cur  []ifaceNet
	read time.Time
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
	g.mu.Lock()
	if t := now(); g.read.IsZero() || t.Sub(g.read) >= every {
		g.read = t
		list := g.list
		if list == nil {
			list = interfaceNets
		}
		if l, err := list(); err == nil {
			g.cur = l
		}
	}
	cur := g.cur
	g.mu.Unlock()
	for _, ifc := range cur {
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
