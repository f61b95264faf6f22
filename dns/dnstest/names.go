// Package dnstest provides a fake of the DNS server's name side, for the tests of the code
// that asks it (the router's router.Names, the Windows engine's redirect.Names) without a
// dns.Server: the test says which pool, which names and which answers there are.
package dnstest

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
)

// Names is a fixed table of names. Its exported fields are set before use and not changed
// after; its methods are safe for concurrent use (mu guards lookups).
type Names struct {
	// Pool is the fake-IP pool; the zero prefix holds no address.
	Pool netip.Prefix
	// Names is the name behind each address: for a pool address, the name it was given out
	// for (Acquire, NameFor); for another one, a name seen resolving to it (NameFor).
	Names map[netip.Addr]string
	// Resolved answers ResolveViaProxy; a name without addresses fails.
	Resolved map[string][]netip.Addr

	mu      sync.Mutex
	lookups []string
}

// InPool reports whether a is in Pool.
func (n *Names) InPool(a netip.Addr) bool { return n.Pool.Contains(a) }

// Acquire returns the name behind pool address a; release does nothing.
func (n *Names) Acquire(a netip.Addr) (name string, release func(), ok bool) {
	if !n.InPool(a) {
		return "", nil, false
	}
	name, ok = n.Names[a]
	return name, func() {}, ok
}

// NameFor returns the name behind a, pool address or not.
func (n *Names) NameFor(a netip.Addr) (string, bool) {
	name, ok := n.Names[a]
	return name, ok
}

// ResolveViaProxy answers from Resolved and records the lookup.
func (n *Names) ResolveViaProxy(_ context.Context, name string) ([]netip.Addr, error) {
	n.mu.Lock()
	n.lookups = append(n.lookups, name)
	n.mu.Unlock()
	if a := n.Resolved[name]; len(a) > 0 {
		return slices.Clone(a), nil
	}
	return nil, fmt.Errorf("resolve %s via proxy: no address in the test", name)
}

// Lookups returns the names ResolveViaProxy was asked for, in order.
func (n *Names) Lookups() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.lookups)
}
