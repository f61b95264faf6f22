package nftcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/internal/ports"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// Chain names. They appear in `nft list table inet router` and in the package doc.
const (
	chainPrerouting  = "prerouting"   // nat, prerouting: VM sources -> vm_capture
	chainVMCapture   = "vm_capture"   // DNS -> DNSPort, then capture_tcp
	chainOutput      = "output"       // nat, output (Local): own host -> DNSPort / capture_tcp
	chainCaptureTCP  = "capture_tcp"  // not local-ish destination: TCP -> ListenerPort
	chainOutputGuard = "output_guard" // filter, output (Local): refuse what capture cannot take
	chainInput       = "input"        // filter, input: listener guard, forwards, VM sources
	chainVMInput     = "vm_input"     // what VM sources may reach on the host
	chainForward     = "forward"      // filter, forward: refuse everything from/to VM networks
	chainRefuse      = "refuse"       // TCP reset / ICMP admin-prohibited / drop
	chainRefuseGuest = "refuse_guest" // what the cage sent that was not captured, by protocol
	chainRefuseLocal = "refuse_local" // what this host sent that Local cannot capture, by protocol
	chainAntispoof   = "antispoof"    // drop new flows whose source does not route back via iif
	setVM4           = "vm4"
	setVM6           = "vm6"
)

// Hook priorities. The nat chains run ahead of the usual dstnat priority (-100) so that our
// redirect is the NAT binding even when another table (libvirt, docker) has a dstnat chain.
const (
	prioNAT    nftables.ChainPriority = -110
	prioFilter nftables.ChainPriority = 0
)

// Install replaces the router's table with the ruleset for spec, in one netlink batch: the
// old table (if any, whatever it contains) is deleted and the new one added in the same
// kernel transaction, so there is never a moment without a guard, and a batch the kernel
// refuses leaves the old table as it was. The table carries no owner flag: it stays when
// the calling process exits or dies, until Remove. Callers serialise Install and Remove on
// one table.
func Install(spec Spec, opts ...Option) error {
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("nftcap install: invalid spec: %w", err)
	}
	o := collect(opts)
	// The routes first: without them the table's UDP capture refuses what it marks; without
	// the table they route nothing.
	if err := installUDPRoutes(spec, o); err != nil {
		return fmt.Errorf("nftcap install udp routing: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(o.netNS), nftables.WithSockOptions(bigReceiveBuffer))
	if err != nil {
		return fmt.Errorf("nftcap install: open netlink: %w", err)
	}
	b := &builder{c: c}
	if err := b.replace(spec); err != nil {
		return fmt.Errorf("nftcap install table inet %s: %w", spec.table(), err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftcap install table inet %s: %w", spec.table(), err)
	}
	return nil
}

// Remove deletes the table named table and with it the guard.
// Removing a table that is not there is not an error: the result, no table, is the same.
func Remove(table string, opts ...Option) error {
	if err := validTableName(table); err != nil {
		return fmt.Errorf("nftcap remove: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(collect(opts).netNS), nftables.WithSockOptions(bigReceiveBuffer))
	if err != nil {
		return fmt.Errorf("nftcap remove: open netlink: %w", err)
	}
	t := &nftables.Table{Name: table, Family: nftables.TableFamilyINet}
	c.AddTable(t) // create-if-absent makes the delete below succeed either way
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftcap remove table inet %s: %w", table, err)
	}
	if err := removeUDPRoutes(collect(opts)); err != nil {
		return fmt.Errorf("nftcap remove udp routing: %w", err)
	}
	return nil
}

// Installed reports whether the table named table exists. It
// does not check the table's content.
func Installed(table string, opts ...Option) (bool, error) {
	c, err := nftables.New(nftables.WithNetNSFd(collect(opts).netNS), nftables.WithSockOptions(bigReceiveBuffer))
	if err != nil {
		return false, fmt.Errorf("nftcap installed: open netlink: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("nftcap installed: list tables: %w", err)
	}
	return slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == table }), nil
}

// Refusals reads the table's refusal counters: packets refused per reason since the table
// was installed (an Install starts them at zero). A table without them (none installed, or
// one from an older router) gives an empty map.
func Refusals(table string, opts ...Option) (map[refusal.Reason]uint64, error) {
	if err := validTableName(table); err != nil {
		return nil, fmt.Errorf("nftcap refusals: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(collect(opts).netNS), nftables.WithSockOptions(bigReceiveBuffer))
	if err != nil {
		return nil, fmt.Errorf("nftcap refusals: open netlink: %w", err)
	}
	objs, err := c.GetNamedObjects(&nftables.Table{Name: table, Family: nftables.TableFamilyINet})
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return map[refusal.Reason]uint64{}, nil
		}
		return nil, fmt.Errorf("nftcap refusals: table inet %s: %w", table, err)
	}
	byName := map[string]refusal.Reason{}
	for _, r := range kernelReasons {
		byName[CounterName(r)] = r
	}
	out := map[refusal.Reason]uint64{}
	for _, o := range objs {
		if n, ok := o.(*nftables.NamedObj); ok {
			if r, known := byName[n.Name]; known {
				if cnt, ok := n.Obj.(*expr.Counter); ok {
					out[r] += cnt.Packets
				}
			}
		}
	}
	return out, nil
}

// receiveBuffer is the netlink socket's receive buffer: the kernel acknowledges each
// message of a batch, and a whole table is hundreds of messages; acknowledgements that do
// not fit in the default buffer (rmem_default, about 200 KiB, some 280 of them) fail the
// batch with ENOBUFS.
const receiveBuffer = 8 << 20

// bigReceiveBuffer sets the receive buffer of c to receiveBuffer, past net.core.rmem_max
// with SO_RCVBUFFORCE (the router runs with CAP_NET_ADMIN), within it otherwise.
func bigReceiveBuffer(c *netlink.Conn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, receiveBuffer)
	}); err != nil {
		return err
	}
	if serr != nil {
		return c.SetReadBuffer(receiveBuffer)
	}
	return nil
}

// builder queues the messages of one Install batch on c.
type builder struct {
	c      *nftables.Conn
	t      *nftables.Table
	setID  uint32
	chains map[string]*nftables.Chain
	err    error
	// rules and elems, when not nil, count the rules queued per chain and the elements
	// queued per named set (expectedLayout).
	rules, elems map[string]int
}

// replace queues: add table (create if absent), delete table, then the whole new table.
func (b *builder) replace(s Spec) error {
	b.t = &nftables.Table{Name: s.table(), Family: nftables.TableFamilyINet}
	b.c.AddTable(b.t)
	b.c.DelTable(b.t)
	b.c.AddTable(b.t)

	var vm4, vm6 []netip.Prefix
	for _, p := range s.VMNetworks {
		if p.Addr().Is4() {
			vm4 = append(vm4, p)
		} else {
			vm6 = append(vm6, p)
		}
	}
	vm := vmSets{b.namedPrefixSet(setVM4, false, vm4), b.namedPrefixSet(setVM6, true, vm6)}
	b.addChains(s)
	b.refuseAndAntispoof(s)
	b.capture(s, vm)
	b.input(s, vm)
	b.forward(s, vm)
	b.udpCapture(s, vm)
	return b.err
}

// vmSets are the named sets of VM networks, IPv4 and IPv6.
type vmSets struct{ v4, v6 *nftables.Set }

// addChains queues every chain of the table, regular chains first: rules may only jump
// to chains that exist.
func (b *builder) addChains(s Spec) {
	b.chains = map[string]*nftables.Chain{}
	accept := nftables.ChainPolicyAccept
	base := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio nftables.ChainPriority) {
		b.chains[name] = b.c.AddChain(&nftables.Chain{
			Name: name, Table: b.t, Type: typ, Hooknum: hook,
			Priority: nftables.ChainPriorityRef(prio), Policy: &accept,
		})
	}
	regular := func(name string) {
		b.chains[name] = b.c.AddChain(&nftables.Chain{Name: name, Table: b.t})
	}
	defer func() {
		if b.rules != nil {
			for name := range b.chains {
				b.rules[name] = 0
			}
		}
	}()
	regular(chainRefuse)
	for _, r := range kernelReasons {
		regular(reasonChain(r))
		b.c.AddObj(&nftables.CounterObj{Table: b.t, Name: CounterName(r)})
	}
	regular(chainRefuseGuest)
	regular(chainRefuseLocal)
	regular(chainAntispoof)
	regular(chainCaptureTCP)
	regular(chainVMCapture)
	regular(chainVMInput)
	for i := range s.Forwards {
		regular(forwardChain(i))
	}
	for i := range s.Inbounds {
		regular(inboundChain(i))
	}
	base(chainPrerouting, nftables.ChainTypeNAT, nftables.ChainHookPrerouting, prioNAT)
	if s.Local {
		base(chainOutput, nftables.ChainTypeNAT, nftables.ChainHookOutput, prioNAT)
		base(chainOutputGuard, nftables.ChainTypeFilter, nftables.ChainHookOutput, prioFilter)
	}
	base(chainInput, nftables.ChainTypeFilter, nftables.ChainHookInput, prioFilter)
	base(chainForward, nftables.ChainTypeFilter, nftables.ChainHookForward, prioFilter)
	b.addUDPChains(s)
}

func (b *builder) refuseAndAntispoof(s Spec) {
	// refuse_<reason>: each refusal passes the chain of its reason on its way: the reason's
	// named counter counts it and, with a LogGroup, a few a second go to the daemon over
	// NFLOG, prefixed with the reason's name.
	for _, r := range kernelReasons {
		c := reasonChain(r)
		if s.LogGroup != 0 {
			b.rule(c, &expr.Limit{Type: expr.LimitTypePkts, Rate: logRate, Unit: expr.LimitTimeSecond, Burst: logRate},
				&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX | 1<<unix.NFTA_LOG_SNAPLEN,
					Group: s.LogGroup, Snaplen: logSnaplen, Data: []byte(r.String())})
		}
		end := goTo(chainRefuse)
		if r == refusal.Spoofed || r == refusal.ToGuest {
			end = verdict(expr.VerdictDrop) // silently, as before: nobody to tell
		}
		b.rule(c, &expr.Objref{Type: objCounter, Name: CounterName(r)}, end)
	}
	// refuse_guest and refuse_local sort what was not captured by protocol.
	icmp := b.l4protoIn(unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6)
	b.rule(chainRefuseGuest, b.dnsMatch(), goTo(reasonChain(refusal.DNS)))
	b.rule(chainRefuseGuest, l4proto(unix.IPPROTO_UDP), goTo(reasonChain(refusal.GuestUDP)))
	b.rule(chainRefuseGuest, icmp, goTo(reasonChain(refusal.ICMP)))
	b.rule(chainRefuseGuest, goTo(reasonChain(refusal.NotCarried)))
	b.rule(chainRefuseLocal, b.dnsMatch(), goTo(reasonChain(refusal.DNS)))
	b.rule(chainRefuseLocal, l4proto(unix.IPPROTO_UDP), goTo(reasonChain(refusal.LocalUDP)))
	b.rule(chainRefuseLocal, b.l4protoIn(unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6), goTo(reasonChain(refusal.ICMP)))
	b.rule(chainRefuseLocal, goTo(reasonChain(refusal.NotCarried)))

	// refuse: the one place packets are refused, so its counters total the refusals.
	b.rule(chainRefuse, metaNe(expr.MetaKeyPKTTYPE, []byte{unix.PACKET_HOST}), counter(), verdict(expr.VerdictDrop))
	// A TCP reset to a link-local source finds no route (the kernel looks it up without the
	// interface), so the client would wait for its timeout: ICMPv6 names the interface.
	b.rule(chainRefuse, nfproto(unix.NFPROTO_IPV6), saddr(true), b.anonPrefixSet(true, []netip.Prefix{linkLocal6}), counter(),
		&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})
	b.rule(chainRefuse, l4proto(unix.IPPROTO_TCP), counter(), &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
	b.rule(chainRefuse, counter(), &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})

	// antispoof: a strict reverse-path check (RFC 3704) on the first packet of each flow.
	// Without it a VM with root sends from an address outside VMNetworks and is routed
	// like anybody else (IPv6 has no rp_filter at all; IPv4's is usually loose). The
	// lookup respects policy routing (mark) and every route via iif, not only the best.
	b.rule(chainAntispoof, ctStateIn(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictReturn))
	b.rule(chainAntispoof, iifLo(), verdict(expr.VerdictReturn))
	b.rule(chainAntispoof, nfproto(unix.NFPROTO_IPV4), saddr(false), cmpEq(make([]byte, 4)), verdict(expr.VerdictReturn)) // DHCP discover
	b.rule(chainAntispoof, nfproto(unix.NFPROTO_IPV6), saddr(true), cmpEq(make([]byte, 16)), verdict(expr.VerdictReturn)) // duplicate address detection
	b.rule(chainAntispoof,
		&expr.Fib{Register: 1, FlagSADDR: true, FlagMARK: true, FlagIIF: true, ResultOIF: true, FlagPRESENT: true},
		cmpEq(native32(0)), counter(), goTo(reasonChain(refusal.Spoofed)))
}

// capture queues the nat chains: prerouting for VM sources, output for Local.
func (b *builder) capture(s Spec, vm vmSets) {
	// capture_tcp: TCP to anything that is not this host, loopback, link-local, multicast
	// or broadcast goes to the listener.
	b.rule(chainCaptureTCP, metaNe(expr.MetaKeyL4PROTO, []byte{unix.IPPROTO_TCP}), verdict(expr.VerdictReturn))
	b.rule(chainCaptureTCP, b.fibDaddrTypeIn(unix.RTN_LOCAL, unix.RTN_BROADCAST, unix.RTN_MULTICAST), verdict(expr.VerdictReturn))
	b.rule(chainCaptureTCP, nfproto(unix.NFPROTO_IPV4), daddr(false), b.anonPrefixSet(false, notCaptured(false)), verdict(expr.VerdictReturn))
	b.rule(chainCaptureTCP, nfproto(unix.NFPROTO_IPV6), daddr(true), b.anonPrefixSet(true, notCaptured(true)), verdict(expr.VerdictReturn))
	b.rule(chainCaptureTCP, l4proto(unix.IPPROTO_TCP), redirect(s.ListenerPort))

	// vm_capture: DNS first (to any destination, the host's own resolver included), then TCP.
	if s.DNSPort != 0 {
		b.rule(chainVMCapture, b.dnsMatch(), redirect(s.DNSPort))
	} else {
		b.rule(chainVMCapture, b.dnsMatch(), verdict(expr.VerdictReturn)) // left to the filter chains: refused
	}
	b.rule(chainVMCapture, goTo(chainCaptureTCP))

	// Packets looping through lo are the host's own (their source may lie in a VM network:
	// the host's VM-facing address usually does); Local handles them in output.
	b.rule(chainPrerouting, iifLo(), verdict(expr.VerdictReturn))
	b.rule(chainPrerouting, saddrIn(vm.v4, false), goTo(chainVMCapture))
	b.rule(chainPrerouting, saddrIn(vm.v6, true), goTo(chainVMCapture))
	for _, i := range s.VMInterfaces {
		b.rule(chainPrerouting, ifname(expr.MetaKeyIIFNAME, i), goTo(chainVMCapture))
	}

	if !s.Local {
		return
	}
	mark := metaEq(expr.MetaKeyMARK, native32(s.Mark))
	oifLo := metaEq(expr.MetaKeyOIF, native32(loopbackIfindex))
	b.rule(chainOutput, mark, verdict(expr.VerdictReturn))
	b.rule(chainOutput, oifLo, verdict(expr.VerdictReturn))
	if s.DNSPort != 0 {
		b.rule(chainOutput, b.dnsMatch(), redirect(s.DNSPort))
	}
	b.rule(chainOutput, goTo(chainCaptureTCP))

	// output_guard: what the router cannot proxy (UDP such as QUIC, ICMP, other protocols)
	// does not leave this host, but for DHCP and the ports of LocalUDPAllow. Redirected DNS
	// and TCP have been rerouted to lo by the nat chain by now.
	g := chainOutputGuard
	b.rule(g, mark, verdict(expr.VerdictReturn))
	b.rule(g, oifLo, verdict(expr.VerdictReturn))
	b.udpOutputGuard(s)
	if s.DNSPort == 0 {
		b.rule(g, b.dnsMatch(), goTo(reasonChain(refusal.DNS)))
	}
	// The link's own control traffic: IPv6 neighbour discovery and router advertisements
	// (to VM networks too: without them the guests lose IPv6), multicast listener reports,
	// IGMP.
	b.rule(g, l4proto(unix.IPPROTO_ICMPV6), b.icmp6TypeIn(mldQuery, mldReport, mldDone, ndRouterSolicit, ndRouterAdvert,
		ndNeighborSolicit, ndNeighborAdvert, ndRedirect, mld2Report), verdict(expr.VerdictReturn))
	b.rule(g, l4proto(unix.IPPROTO_IGMP), verdict(expr.VerdictReturn))
	// The host's answers to its guests about their own packets: the ICMP errors that
	// refuse reject sends (conntrack marks them related), so a guest's refused UDP or ICMP
	// fails at once. To the guests only: elsewhere an ICMP error could carry anything.
	related := ctStateIn(expr.CtStateBitRELATED)
	b.rule(g, b.l4protoIn(unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6), related, daddrIn(vm.v4, false), verdict(expr.VerdictReturn))
	b.rule(g, b.l4protoIn(unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6), related, daddrIn(vm.v6, true), verdict(expr.VerdictReturn))
	for _, i := range s.VMInterfaces {
		b.rule(g, b.l4protoIn(unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6), related, ifname(expr.MetaKeyOIFNAME, i), verdict(expr.VerdictReturn))
	}
	// This host and its unicast link addresses; multicast and broadcast UDP are refused like
	// any other UDP (mDNS, SSDP, LLMNR announce this host to the link; list their ports in
	// local_udp_allow to let them out).
	b.rule(g, b.fibDaddrTypeIn(unix.RTN_LOCAL), verdict(expr.VerdictReturn))
	b.rule(g, nfproto(unix.NFPROTO_IPV4), daddr(false), b.anonPrefixSet(false, localUnicast(false)), verdict(expr.VerdictReturn))
	b.rule(g, nfproto(unix.NFPROTO_IPV6), daddr(true), b.anonPrefixSet(true, localUnicast(true)), verdict(expr.VerdictReturn))
	b.rule(g, l4proto(unix.IPPROTO_TCP), verdict(expr.VerdictReturn))
	b.rule(g, l4proto(unix.IPPROTO_UDP), b.thDportIn(append(ports.DHCP(), s.LocalUDPAllow...)...), verdict(expr.VerdictReturn))
	b.rule(g, goTo(chainRefuseLocal))
}

// input queues the guard of the host: listener ports, forwards, VM sources.
func (b *builder) input(s Spec, vm vmSets) {
	b.udpInput(s)
	b.rule(chainInput, jump(chainAntispoof))
	// The listener ports take only redirected connections, from anywhere.
	b.rule(chainInput, l4proto(unix.IPPROTO_TCP), thDport(s.ListenerPort), ctStatusDNAT(false), goTo(reasonChain(refusal.Host)))
	if s.DNSPort != 0 {
		b.rule(chainInput, b.l4protoIn(unix.IPPROTO_TCP, unix.IPPROTO_UDP), thDport(s.DNSPort), ctStatusDNAT(false), goTo(reasonChain(refusal.Host)))
	}
	for i, f := range s.Forwards {
		b.allowOnly(forwardChain(i), f)
	}
	for i, f := range s.Inbounds {
		b.allowOnly(inboundChain(i), f)
	}
	b.rule(chainInput, iifLo(), verdict(expr.VerdictAccept))
	b.rule(chainInput, saddrIn(vm.v4, false), goTo(chainVMInput))
	b.rule(chainInput, saddrIn(vm.v6, true), goTo(chainVMInput))
	for _, i := range s.VMInterfaces {
		b.rule(chainInput, ifname(expr.MetaKeyIIFNAME, i), goTo(chainVMInput))
	}

	// vm_input: the host is off limits to VM sources. Of established flows only the
	// replies of connections this host opened pass: a guest's own connection to the host
	// that was established before the guard (or before its interface was caged) is cut.
	b.rule(chainVMInput, ctStateIn(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), ctDirection(ctDirReply), verdict(expr.VerdictAccept))
	b.rule(chainVMInput, l4proto(unix.IPPROTO_TCP), thDport(s.ListenerPort), verdict(expr.VerdictAccept))
	if s.DNSPort != 0 {
		b.rule(chainVMInput, b.l4protoIn(unix.IPPROTO_TCP, unix.IPPROTO_UDP), thDport(s.DNSPort), verdict(expr.VerdictAccept))
	}
	b.rule(chainVMInput, l4proto(unix.IPPROTO_UDP), b.thDportIn(ports.DHCPServers()...), verdict(expr.VerdictAccept))
	b.rule(chainVMInput, l4proto(unix.IPPROTO_ICMPV6), b.icmp6TypeIn(
		ndRouterSolicit, ndNeighborSolicit, ndNeighborAdvert), verdict(expr.VerdictAccept))
	b.rule(chainVMInput, goTo(reasonChain(refusal.Host)))
}

// allowOnly queues the guard of one forward or inbound: its listen address and port go to
// chain, which accepts the Allow sources and refuses the rest.
func (b *builder) allowOnly(chain string, f Forward) {
	b.rule(chainInput, listenMatch(f.Listen.Addr()), l4proto(unix.IPPROTO_TCP), thDport(f.Listen.Port()), goTo(chain))
	var allow4, allow6 []netip.Prefix
	for _, p := range f.Allow {
		if p.Addr().Is4() {
			allow4 = append(allow4, p)
		} else {
			allow6 = append(allow6, p)
		}
	}
	if len(allow4) > 0 {
		b.rule(chain, nfproto(unix.NFPROTO_IPV4), saddr(false), b.anonPrefixSet(false, allow4), verdict(expr.VerdictAccept))
	}
	if len(allow6) > 0 {
		b.rule(chain, nfproto(unix.NFPROTO_IPV6), saddr(true), b.anonPrefixSet(true, allow6), verdict(expr.VerdictAccept))
	}
	b.rule(chain, goTo(reasonChain(refusal.ForwardSource)))
}

// listenMatch matches a forward's listen address: 0.0.0.0 any IPv4 address, :: any address.
func listenMatch(a netip.Addr) []expr.Any {
	a = a.WithZone("")
	switch {
	case a == netip.IPv6Unspecified():
		return nil
	case a.Is4():
		m := append(nfproto(unix.NFPROTO_IPV4), daddr(false)...)
		if a.IsUnspecified() {
			return m
		}
		return append(m, cmpEq(a.AsSlice()))
	default:
		return append(append(nfproto(unix.NFPROTO_IPV6), daddr(true)...), cmpEq(a.AsSlice()))
	}
}

// forward queues the forward chain: nothing from or to a VM network is forwarded; it was
// not redirected, so the router cannot proxy it.
func (b *builder) forward(s Spec, vm vmSets) {
	b.rule(chainForward, jump(chainAntispoof))
	b.rule(chainForward, saddrIn(vm.v4, false), goTo(chainRefuseGuest))
	b.rule(chainForward, saddrIn(vm.v6, true), goTo(chainRefuseGuest))
	b.rule(chainForward, daddrIn(vm.v4, false), counter(), goTo(reasonChain(refusal.ToGuest)))
	b.rule(chainForward, daddrIn(vm.v6, true), counter(), goTo(reasonChain(refusal.ToGuest)))
	for _, i := range s.VMInterfaces {
		b.rule(chainForward, ifname(expr.MetaKeyIIFNAME, i), goTo(chainRefuseGuest))
		b.rule(chainForward, ifname(expr.MetaKeyOIFNAME, i), counter(), goTo(reasonChain(refusal.ToGuest)))
	}
}

// ifname matches an interface name (key IIFNAME or OIFNAME); a trailing '*' matches any
// suffix, as in nft: the comparison then covers the prefix only, without the terminating
// NUL.
func ifname(key expr.MetaKey, name string) []expr.Any {
	var data []byte
	if base, wild := strings.CutSuffix(name, "*"); wild {
		data = []byte(base)
	} else {
		data = make([]byte, unix.IFNAMSIZ)
		copy(data, name)
	}
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, cmpEq(data)}
}

func iifLo() []expr.Any { return metaEq(expr.MetaKeyIIF, native32(loopbackIfindex)) }

func forwardChain(i int) string { return fmt.Sprintf("forward_%d", i) }

// kernelReasons are the refusals the table counts, each in a chain and a named counter of
// its own.
var kernelReasons = []refusal.Reason{
	refusal.Host, refusal.ForwardSource, refusal.DNS, refusal.GuestUDP, refusal.ICMP,
	refusal.NotCarried, refusal.LocalUDP, refusal.Spoofed, refusal.ToGuest,
}

// reasonChain is the chain of refusal reason r: "refuse_guest_udp".
func reasonChain(r refusal.Reason) string {
	return "refuse_" + strings.ReplaceAll(r.String(), "-", "_")
}

// CounterName is the named counter of refusal reason r in the table: "refused_guest_udp"
// (`nft list counters table inet router`).
func CounterName(r refusal.Reason) string {
	return "refused_" + strings.ReplaceAll(r.String(), "-", "_")
}

const (
	objCounter = 1 // NFT_OBJECT_COUNTER
	// logRate bounds the refusals of one reason sent to the daemon per second (and the
	// burst): enough to keep the latest few, too few for a flood to cost anything.
	logRate = 20
	// logSnaplen is how much of a refused packet NFLOG copies: the IP header and the ports.
	logSnaplen = 80
)

func inboundChain(i int) string { return fmt.Sprintf("inbound_%d", i) }

// linkLocal6 is the IPv6 link-local unicast prefix (RFC 4291 section 2.5.6).
var linkLocal6 = netip.MustParsePrefix("fe80::/10")

// loopbackIfindex is the index of lo, the first interface of every network namespace.
const loopbackIfindex = 1

// ICMPv6 neighbour discovery (RFC 4861 section 4) and multicast listener discovery (RFC
// 2710, RFC 3810) types.
const (
	mldQuery          = 130
	mldReport         = 131
	mldDone           = 132
	ndRouterSolicit   = 133
	ndRouterAdvert    = 134
	ndNeighborSolicit = 135
	ndNeighborAdvert  = 136
	ndRedirect        = 137
	mld2Report        = 143
)

// notCaptured are the destinations capture_tcp never redirects, besides what fib calls
// local, broadcast or multicast: the policy's local prefixes (policy.LocalPrefixes) of one
// family.
func notCaptured(v6 bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range policy.LocalPrefixes() {
		if p.Addr().Is6() == v6 {
			out = append(out, p)
		}
	}
	return out
}

// localUnicast are the unicast local destinations of one family: the policy's local
// prefixes without multicast and broadcast.
func localUnicast(v6 bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range notCaptured(v6) {
		if !p.Addr().IsMulticast() && p.Addr() != netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			out = append(out, p)
		}
	}
	return out
}

// rule queues a rule made of the given expressions, flattened in order. Each part is an
// expr.Any or a []expr.Any.
func (b *builder) rule(chain string, parts ...any) {
	var exprs []expr.Any
	for _, p := range parts {
		switch p := p.(type) {
		case []expr.Any:
			exprs = append(exprs, p...)
		case expr.Any:
			exprs = append(exprs, p)
		default:
			panic(fmt.Sprintf("nftcap: rule part %T", p))
		}
	}
	b.c.AddRule(&nftables.Rule{Table: b.t, Chain: b.chains[chain], Exprs: exprs})
	if b.rules != nil {
		b.rules[chain]++
	}
}

// addSet queues set with its elements. IDs are allocated here, per batch, rather than by the
// library's package-wide counter.
func (b *builder) addSet(s *nftables.Set, elems []nftables.SetElement) *nftables.Set {
	b.setID++
	s.ID = b.setID
	s.Table = b.t
	if s.Anonymous {
		s.Name = "__set%d"
		s.Constant = true
	}
	if err := b.c.AddSet(s, elems); err != nil && b.err == nil {
		b.err = fmt.Errorf("add set: %w", err)
	}
	if b.elems != nil && !s.Anonymous {
		b.elems[s.Name] = len(elems)
	}
	return s
}

func (b *builder) namedPrefixSet(name string, v6 bool, ps []netip.Prefix) *nftables.Set {
	return b.addSet(&nftables.Set{Name: name, KeyType: addrType(v6), Interval: true}, intervalElements(v6, ps))
}

// anonPrefixSet returns a lookup of register 1 in a constant interval set of ps.
func (b *builder) anonPrefixSet(v6 bool, ps []netip.Prefix) expr.Any {
	s := b.addSet(&nftables.Set{Anonymous: true, KeyType: addrType(v6), Interval: true}, intervalElements(v6, ps))
	return &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}
}

// anonSet returns a lookup of register 1 in a constant set of keys.
func (b *builder) anonSet(typ nftables.SetDatatype, keys ...[]byte) expr.Any {
	elems := make([]nftables.SetElement, len(keys))
	for i, k := range keys {
		elems[i] = nftables.SetElement{Key: k}
	}
	s := b.addSet(&nftables.Set{Anonymous: true, KeyType: typ}, elems)
	return &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}
}

func (b *builder) l4protoIn(protos ...byte) []expr.Any {
	keys := make([][]byte, len(protos))
	for i, p := range protos {
		keys[i] = []byte{p}
	}
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, b.anonSet(nftables.TypeInetProto, keys...)}
}

func (b *builder) thDportIn(ports ...uint16) []expr.Any {
	keys := make([][]byte, len(ports))
	for i, p := range ports {
		keys[i] = binary.BigEndian.AppendUint16(nil, p)
	}
	return []expr.Any{thDportLoad(), b.anonSet(nftables.TypeInetService, keys...)}
}

func (b *builder) icmp6TypeIn(types ...byte) []expr.Any {
	keys := make([][]byte, len(types))
	for i, t := range types {
		keys[i] = []byte{t}
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		b.anonSet(nftables.TypeICMP6Type, keys...),
	}
}

func (b *builder) fibDaddrTypeIn(types ...uint32) []expr.Any {
	keys := make([][]byte, len(types))
	for i, t := range types {
		keys[i] = native32(t)
	}
	return []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		b.anonSet(nftables.TypeFIBAddr, keys...),
	}
}

// dnsMatch matches UDP and TCP to the DNS port.
func (b *builder) dnsMatch() []expr.Any {
	return append(b.l4protoIn(unix.IPPROTO_TCP, unix.IPPROTO_UDP), thDport(ports.DNS)...)
}

func addrType(v6 bool) nftables.SetDatatype {
	if v6 {
		return nftables.TypeIP6Addr
	}
	return nftables.TypeIPAddr
}

// intervalElements encodes prefixes the way nft does for an interval set: a start element
// per range and an interval-end element one past its last address (none when the range
// reaches the top of the address space), plus a leading interval-end at the zero address
// when no range starts there. Overlapping and adjacent prefixes are merged.
func intervalElements(v6 bool, ps []netip.Prefix) []nftables.SetElement {
	if len(ps) == 0 {
		return nil
	}
	type span struct{ lo, hi netip.Addr }
	spans := make([]span, 0, len(ps))
	for _, p := range ps {
		p = p.Masked()
		spans = append(spans, span{p.Addr(), netaddr.LastAddr(p)})
	}
	slices.SortFunc(spans, func(a, b span) int { return a.lo.Compare(b.lo) })
	merged := spans[:1]
	for _, s := range spans[1:] {
		last := &merged[len(merged)-1]
		if next := last.hi.Next(); !next.IsValid() || s.lo.Compare(next) <= 0 {
			if s.hi.Compare(last.hi) > 0 {
				last.hi = s.hi
			}
			continue
		}
		merged = append(merged, s)
	}
	zero := netip.IPv4Unspecified()
	if v6 {
		zero = netip.IPv6Unspecified()
	}
	var elems []nftables.SetElement
	if merged[0].lo != zero {
		elems = append(elems, nftables.SetElement{Key: zero.AsSlice(), IntervalEnd: true})
	}
	for _, s := range merged {
		elems = append(elems, nftables.SetElement{Key: s.lo.AsSlice()})
		if end := s.hi.Next(); end.IsValid() {
			elems = append(elems, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return elems
}

// Expression helpers; all load into register 1.

func nfproto(p byte) []expr.Any { return metaEq(expr.MetaKeyNFPROTO, []byte{p}) }

func l4proto(p byte) []expr.Any { return metaEq(expr.MetaKeyL4PROTO, []byte{p}) }

func metaEq(k expr.MetaKey, v []byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: k, Register: 1}, cmpEq(v)}
}

func metaNe(k expr.MetaKey, v []byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: k, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: v}}
}

func cmpEq(v []byte) expr.Any { return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: v} }

func thDportLoad() expr.Any {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
}

func thDport(port uint16) []expr.Any {
	return []expr.Any{thDportLoad(), cmpEq(binary.BigEndian.AppendUint16(nil, port))}
}

// saddr and daddr load the IPv4 or IPv6 source or destination address (after an nfproto
// match).
func saddr(v6 bool) []expr.Any { return addrLoad(v6, false) }
func daddr(v6 bool) []expr.Any { return addrLoad(v6, true) }

func addrLoad(v6, dst bool) []expr.Any {
	off, n := uint32(12), uint32(4) // IPv4 saddr (RFC 791)
	if v6 {
		off, n = 8, 16 // IPv6 saddr (RFC 8200)
	}
	if dst {
		off += n
	}
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}}
}

func saddrIn(s *nftables.Set, v6 bool) []expr.Any { return addrIn(s, v6, false) }
func daddrIn(s *nftables.Set, v6 bool) []expr.Any { return addrIn(s, v6, true) }

func addrIn(s *nftables.Set, v6, dst bool) []expr.Any {
	p := byte(unix.NFPROTO_IPV4)
	if v6 {
		p = unix.NFPROTO_IPV6
	}
	out := append(nfproto(p), addrLoad(v6, dst)...)
	return append(out, &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID})
}

// ctStatusDNAT matches connections whose destination was (set) or was not (!set) NATed.
func ctStatusDNAT(set bool) []expr.Any {
	op := expr.CmpOpEq
	if set {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATUS, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: native32(ipsDstNAT), Xor: native32(0)},
		&expr.Cmp{Op: op, Register: 1, Data: native32(0)},
	}
}

// Conntrack directions (enum ip_conntrack_dir): the flow's first packet went ORIGINAL.
const ctDirReply = 1

// ctDirection matches packets that travel in direction dir of their connection.
func ctDirection(dir byte) []expr.Any {
	return []expr.Any{&expr.Ct{Key: expr.CtKeyDIRECTION, Register: 1}, cmpEq([]byte{dir})}
}

func ctStateIn(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: native32(bits), Xor: native32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: native32(0)},
	}
}

func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.Redir{RegisterProtoMin: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}

func counter() expr.Any { return &expr.Counter{} }

func verdict(k expr.VerdictKind) expr.Any { return &expr.Verdict{Kind: k} }

func jump(chain string) expr.Any { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }

func goTo(chain string) expr.Any { return &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain} }

func native32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// ipsDstNAT is IPS_DST_NAT of enum ip_conntrack_status (include/uapi/linux/netfilter/
// nf_conntrack_common.h): the connection's destination was NATed (our redirect sets it).
const ipsDstNAT = 1 << 5

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
