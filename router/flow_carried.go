package router

import (
	"net/netip"
	"sync"
	"time"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// A flow an inbound or a forward accepts keeps the caged identity of its client, also when
// the router itself carries it there: a guest asks an inbound for a forward's or an
// inbound's own address (which the host walls leave open), the router connects to that
// listener from this machine's address, and the listener, which sees this machine as its
// client, must judge the guest instead (its allow list, its caged identity, its rules), or
// a chain of inbounds would be this host's own traffic at its second hop and a source the
// forward refuses would reach the model through an inbound.
//
// So the router remembers, for each connection it opens to one of its own listeners, the
// identity of the flow it carries (carried.put, keyed by the connection's local address and
// port), and a listener that accepts a connection from this machine takes it back
// (carried.take, by the connection's remote address and port). The connect returns to the
// dialer about when the listener's accept does, so take waits up to carriedWait for the
// dialer to put the entry, but only while the router is connecting to one of its own
// listeners (carried.begin and end around such a connect): a client of this machine that
// the router did not carry (a guest behind a user-space NAT such as slirp4netns or pasta,
// whose connections come from this machine) is not held up when no such connect is under
// way, and at most carriedWait when one is. Entries are taken once; those no listener took
// expire after carriedTTL, and at most carriedMax are kept.

const (
	carriedWait = 100 * time.Millisecond
	carriedTTL  = 10 * time.Second
	carriedMax  = 4096
)

// identity is what a listener needs of a carried flow's client: its source, whether it came
// from a VM, and its owner whole (the kernel's caged-socket mark too: a caged process's
// flow carried to a listener stays caged there).
type identity struct {
	src    netip.Addr
	fromVM bool
	owner  rules.Owner
}

func identityOf(pf *policy.Flow) identity {
	return identity{src: pf.Src, fromVM: pf.FromVM, owner: pf.Owner}
}

// apply gives pf the identity (its source address keeps its own port).
func (id identity) apply(pf *policy.Flow) {
	pf.Src, pf.FromVM, pf.Owner = id.src, id.fromVM, id.owner
}

type carriedEntry struct {
	id identity
	at time.Time
}

// carried holds the identities of the flows the router carries to its own listeners. It is
// safe for concurrent use; mu guards m.
type carried struct {
	mu      sync.Mutex
	cond    *sync.Cond
	m       map[netip.AddrPort]carriedEntry
	dialing int // connects to the router's own listeners under way
}

// begin tells that the router starts connecting to what may be one of its own listeners;
// end, that the connect is over and its entry, if any, put.
func (c *carried) begin() {
	c.mu.Lock()
	c.dialing++
	c.mu.Unlock()
}

func (c *carried) end() {
	c.mu.Lock()
	c.dialing--
	c.cond.Broadcast()
	c.mu.Unlock()
}

func (c *carried) init() {
	c.cond = sync.NewCond(&c.mu)
	c.m = map[netip.AddrPort]carriedEntry{}
}

// put remembers that the router's connection from local carries a flow of id.
func (c *carried) put(local netip.AddrPort, id identity) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= carriedMax {
		for k, e := range c.m {
			if now.Sub(e.at) > carriedTTL || len(c.m) >= carriedMax {
				delete(c.m, k)
			}
		}
	}
	c.m[unmapAP(local)] = carriedEntry{id: id, at: now}
	c.cond.Broadcast()
}

// take returns the identity of the flow the router carries on its connection from remote,
// waiting for it while a connect to the router's own listeners is under way (up to
// carriedWait); false when the router carries none there.
func (c *carried) take(remote netip.AddrPort) (identity, bool) {
	remote = unmapAP(remote)
	deadline := time.Now().Add(carriedWait)
	wake := time.AfterFunc(carriedWait, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer wake.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if e, ok := c.m[remote]; ok {
			delete(c.m, remote)
			return e.id, time.Since(e.at) <= carriedTTL
		}
		if c.dialing == 0 || !time.Now().Before(deadline) {
			return identity{}, false
		}
		c.cond.Wait()
	}
}
