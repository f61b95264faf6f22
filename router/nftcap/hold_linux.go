package nftcap

// This file builds the hold table: a second, small table that keeps the cage closed while
// the router's table is missing (see the package doc, "The hold table").

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/ports"
)

// Table flags (NFTA_TABLE_FLAGS, include/uapi/linux/netfilter/nf_tables.h). OWNER: only the
// netlink socket that created the table may change or delete it, and a ruleset flush
// skips it; PERSIST (Linux 6.9): when that socket closes, the table stays, without an
// owner, instead of going with it.
const (
	tableFlagOwner   = 0x2
	tableFlagPersist = 0x4
)

// prioHold runs the hold table's chains after the router's table's (prioFilter): while that
// table is there it has refused everything the hold table drops, so the hold table decides
// nothing.
const prioHold nftables.ChainPriority = prioFilter + 1

// Holder owns hold tables: one netlink socket, open from NewHolder to Close, through which
// Install (WithHolder) creates and replaces them, so that no other process may change or
// flush them while it is open. Close leaves the tables in place, without an owner (the
// persist flag): the cage stays closed after the process ends, however it ends, and
// `router cleanup` can remove them. A Holder is safe for concurrent use.
type Holder struct {
	mu   sync.Mutex // serialises batches on conn; guards conn
	conn *netlink.Conn
}

// NewHolder opens the owning socket, in the network namespace the options name.
func NewHolder(opts ...Option) (*Holder, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: collect(opts).netNS})
	if err != nil {
		return nil, fmt.Errorf("nftcap holder: open netlink: %w", err)
	}
	if err := bigReceiveBuffer(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("nftcap holder: receive buffer: %w", err)
	}
	return &Holder{conn: c}, nil
}

// Close closes the owning socket; the hold tables stay, owned by nobody. It is safe to call
// more than once.
func (h *Holder) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return nil
	}
	err := h.conn.Close()
	h.conn = nil
	return err
}

// errHeld is what the kernel answers a process that is not the owner of a table.
var errHeld = unix.EPERM

// installHold replaces the hold table of spec through o's Holder, or through a socket of
// its own that it closes (the table then stays without an owner). Without a Holder, a hold
// table that a live process owns (a running router, which keeps it current) is left as it
// is.
func installHold(spec Spec, o options) error {
	name := HoldTable(spec.table())
	exists, err := tableExists(name, o)
	if err != nil {
		return err
	}
	send := func(conn *netlink.Conn) error {
		// A kernel before 6.9 refuses persist (EOPNOTSUPP): the table is then the owner's
		// alone and goes with it (the router's table still stays); one before 5.12 refuses
		// owner too (EOPNOTSUPP, or EINVAL on older ones), and has no hold table.
		for _, flags := range []uint32{tableFlagOwner | tableFlagPersist, tableFlagOwner} {
			c, err := nftables.New(nftables.WithTestDial(ownedBatch(conn, flags)))
			if err != nil {
				return err
			}
			t := &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
			if exists {
				c.DelTable(t)
			}
			b := &builder{c: c, t: c.AddTable(t)}
			b.hold(spec)
			if b.err != nil {
				return b.err
			}
			err = c.Flush()
			if err != nil {
				drain(conn) // the next batch on conn must read its own answers
			}
			if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
				return err
			}
		}
		return nil
	}
	if o.holder != nil {
		o.holder.mu.Lock()
		defer o.holder.mu.Unlock()
		if o.holder.conn == nil {
			return errors.New("the holder is closed")
		}
		return send(o.holder.conn)
	}
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: o.netNS})
	if err != nil {
		return fmt.Errorf("open netlink: %w", err)
	}
	defer conn.Close()
	if err := bigReceiveBuffer(conn); err != nil {
		return fmt.Errorf("receive buffer: %w", err)
	}
	if err := send(conn); err != nil {
		if exists && errors.Is(err, errHeld) {
			return nil // a running router holds it
		}
		return err
	}
	return nil
}

// drain reads and drops what the kernel still has to say on conn after a failed batch
// (the answers to its later messages), waiting at most a moment for each.
func drain(conn *netlink.Conn) {
	defer conn.SetReadDeadline(time.Time{})
	for range 10_000 { // bounded: a batch is at most a few thousand messages
		if err := conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
			return
		}
		if _, err := conn.Receive(); err != nil {
			var oe *netlink.OpError
			if errors.As(err, &oe) && (oe.Timeout() || errors.Is(oe.Err, os.ErrDeadlineExceeded)) || errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}
}

// removeHold deletes the hold table of table; one that is not there is no error, one that
// a live process owns is.
func removeHold(table string, o options) error {
	name := HoldTable(table)
	exists, err := tableExists(name, o)
	if err != nil || !exists {
		return err
	}
	c, err := nftables.New(nftables.WithNetNSFd(o.netNS))
	if err != nil {
		return fmt.Errorf("open netlink: %w", err)
	}
	c.DelTable(&nftables.Table{Name: name, Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil {
		if errors.Is(err, errHeld) {
			return fmt.Errorf("table inet %s is held by a running router (stop it first): %w", name, err)
		}
		return err
	}
	return nil
}

// tableExists reports whether the inet table name exists.
func tableExists(name string, o options) (bool, error) {
	c, err := nftables.New(nftables.WithNetNSFd(o.netNS), nftables.WithSockOptions(bigReceiveBuffer))
	if err != nil {
		return false, fmt.Errorf("open netlink: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("list tables: %w", err)
	}
	return slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == name }), nil
}

// ownedBatch is a stand-in for the library's netlink socket (nftables.WithTestDial) that
// sends every request through conn, with flags set on each new table: github.com/google/
// nftables v0.3.0 always sends a table's flags as 0. The library reads the kernel's
// answers back through it as from its own socket.
func ownedBatch(conn *netlink.Conn, flags uint32) func([]netlink.Message) ([]netlink.Message, error) {
	newTable := netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWTABLE)
	return func(req []netlink.Message) ([]netlink.Message, error) {
		if req == nil { // the library waits for an answer
			return conn.Receive()
		}
		for i := range req {
			m := &req[i]
			m.Header.PID, m.Header.Sequence = 0, 0 // conn's own
			if m.Header.Type != newTable || len(m.Data) < 4 {
				continue
			}
			attrs, err := netlink.UnmarshalAttributes(m.Data[4:])
			if err != nil {
				return nil, fmt.Errorf("new table message: %w", err)
			}
			for j := range attrs {
				if attrs[j].Type == unix.NFTA_TABLE_FLAGS {
					attrs[j].Data = []byte{byte(flags >> 24), byte(flags >> 16), byte(flags >> 8), byte(flags)}
				}
			}
			b, err := netlink.MarshalAttributes(attrs)
			if err != nil {
				return nil, fmt.Errorf("new table message: %w", err)
			}
			m.Data = append(m.Data[:4:4], b...)
		}
		_, err := conn.SendMessages(req)
		return nil, err
	}
}

// hold queues the hold table's content (the table itself is queued):
//
//	table inet router_hold   flags owner, persist
//	 set vm4, vm6                          VMNetworks
//	 forward   filter, hook forward, priority filter+1, policy accept
//	   ip saddr @vm4 / ip6 saddr @vm6 / iifname (each VMInterface)   drop
//	   ip daddr @vm4 / ip6 daddr @vm6 / oifname (each VMInterface)   drop
//	 input     filter, hook input, priority filter+1
//	   iif lo meta mark C                   goto hold_guest   (only with CagedApps)
//	   iif lo                               accept   (this host's own)
//	   ip saddr @vm4 / ip6 saddr @vm6 / iifname (each VMInterface)  goto hold_guest
//	 hold_guest   what the router's table lets a guest or a caged socket reach on this host
//	   meta mark U                          accept   (handed over by TPROXY)
//	   ct state established,related ct direction reply  accept
//	   ct status dnat                       accept   (redirected to the listeners)
//	   a forward's or inbound's listen address and port  accept   (its allow was checked)
//	   udp dport {67,547}; icmpv6 type {nd-router-solicit, nd-neighbor-*}  accept
//	   drop
//	 output    filter, hook output, priority filter+1   only with CagedApps
//	   meta mark != C / oif lo / fib daddr type local   return
//	   local prefixes; udp dport {DHCP, LocalUDPAllow}  return
//	   drop   (a caged socket's packet leaving the host: the capture is missing)
//
// An accept in one base chain does not stop the next, so the input chain sees what the
// router's table accepted: hold_guest accepts all of that (and, while that table is there,
// nothing else reaches it).
func (b *builder) hold(s Spec) {
	b.chains = map[string]*nftables.Chain{}
	vm := b.vmSets(s)
	accept := nftables.ChainPolicyAccept
	base := func(name string, hook *nftables.ChainHook) {
		b.chains[name] = b.c.AddChain(&nftables.Chain{
			Name: name, Table: b.t, Type: nftables.ChainTypeFilter, Hooknum: hook,
			Priority: nftables.ChainPriorityRef(prioHold), Policy: &accept,
		})
	}
	drop := verdict(expr.VerdictDrop)
	base(chainForward, nftables.ChainHookForward)
	b.rule(chainForward, saddrIn(vm.v4, false), drop)
	b.rule(chainForward, saddrIn(vm.v6, true), drop)
	b.rule(chainForward, daddrIn(vm.v4, false), drop)
	b.rule(chainForward, daddrIn(vm.v6, true), drop)
	for _, i := range s.VMInterfaces {
		b.rule(chainForward, ifname(expr.MetaKeyIIFNAME, i), drop)
		b.rule(chainForward, ifname(expr.MetaKeyOIFNAME, i), drop)
	}
	b.holdInput(s, vm)
	if !s.caged() {
		return
	}
	const out = "output"
	base(out, nftables.ChainHookOutput)
	ret := verdict(expr.VerdictReturn)
	b.rule(out, metaNe(expr.MetaKeyMARK, native32(s.CagedMark)), ret)
	b.rule(out, metaEq(expr.MetaKeyOIF, native32(loopbackIfindex)), ret)
	b.rule(out, b.fibDaddrTypeIn(unix.RTN_LOCAL), ret)
	b.rule(out, nfproto(unix.NFPROTO_IPV4), daddr(false), b.anonPrefixSet(false, notCaptured(false)), ret)
	b.rule(out, nfproto(unix.NFPROTO_IPV6), daddr(true), b.anonPrefixSet(true, notCaptured(true)), ret)
	b.rule(out, l4proto(unix.IPPROTO_UDP), b.thDportIn(append(ports.DHCP(), s.LocalUDPAllow...)...), ret)
	b.rule(out, drop)
}

// chainHoldGuest is the hold table's judge of what reaches this host from a guest or a
// caged socket.
const chainHoldGuest = "hold_guest"

// holdInput queues the hold table's input chain and hold_guest (see hold).
func (b *builder) holdInput(s Spec, vm vmSets) {
	b.chains[chainHoldGuest] = b.c.AddChain(&nftables.Chain{Name: chainHoldGuest, Table: b.t})
	accept := nftables.ChainPolicyAccept
	b.chains[chainInput] = b.c.AddChain(&nftables.Chain{
		Name: chainInput, Table: b.t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput,
		Priority: nftables.ChainPriorityRef(prioHold), Policy: &accept,
	})
	if s.caged() {
		b.rule(chainInput, iifLo(), b.cagedMark(s), goTo(chainHoldGuest))
	}
	// This host's own packets on lo carry its VM-facing address (inside a VM network) too.
	b.rule(chainInput, iifLo(), verdict(expr.VerdictAccept))
	b.rule(chainInput, saddrIn(vm.v4, false), goTo(chainHoldGuest))
	b.rule(chainInput, saddrIn(vm.v6, true), goTo(chainHoldGuest))
	for _, i := range s.VMInterfaces {
		b.rule(chainInput, ifname(expr.MetaKeyIIFNAME, i), goTo(chainHoldGuest))
	}
	g, ok := chainHoldGuest, verdict(expr.VerdictAccept)
	if s.tproxied() {
		b.rule(g, metaEq(expr.MetaKeyMARK, native32(s.UDPMark)), ok)
	}
	b.rule(g, ctStateIn(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), ctDirection(ctDirReply), ok)
	b.rule(g, ctStatusDNAT(true), ok)
	for _, f := range append(slices.Clip(s.Forwards), s.Inbounds...) {
		b.rule(g, listenMatch(f.Listen.Addr()), l4proto(unix.IPPROTO_TCP), thDport(f.Listen.Port()), ok)
	}
	b.rule(g, l4proto(unix.IPPROTO_UDP), b.thDportIn(ports.DHCPServers()...), ok)
	b.rule(g, l4proto(unix.IPPROTO_ICMPV6), b.icmp6TypeIn(ndRouterSolicit, ndNeighborSolicit, ndNeighborAdvert), ok)
	b.rule(g, verdict(expr.VerdictDrop))
}
