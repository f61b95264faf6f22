package nftcap

// This file builds the table: its chains and their rules, in the order the package doc
// draws them (the UDP capture's chains are in udp_linux.go).

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

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

	vm := b.vmSets(s)
	b.addChains(s)
	b.refuseAndAntispoof(s)
	b.capture(s, vm)
	b.input(s, vm)
	b.forward(s, vm)
	b.udpCapture(s, vm)
	b.tcpCapture(s, vm)
	return b.err
}

// vmSets are the named sets of VM networks, IPv4 and IPv6.
type vmSets struct{ v4, v6 *nftables.Set }

// vmSets queues the named sets of s's VM networks, the IPv4 ones and the IPv6 ones.
func (b *builder) vmSets(s Spec) vmSets {
	vm4, vm6 := byFamily(s.VMNetworks)
	return vmSets{b.namedPrefixSet(setVM4, false, vm4), b.namedPrefixSet(setVM6, true, vm6)}
}

// byFamily splits ps into its IPv4 prefixes and its IPv6 ones, each in ps's order.
func byFamily(ps []netip.Prefix) (v4, v6 []netip.Prefix) {
	for _, p := range ps {
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	return v4, v6
}

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
	b.addCagedChains(s)
	base(chainPrerouting, nftables.ChainTypeNAT, nftables.ChainHookPrerouting, prioNAT)
	if s.Local || s.caged() {
		base(chainOutput, nftables.ChainTypeNAT, nftables.ChainHookOutput, prioNAT)
	}
	if s.Local || s.caged() {
		base(chainOutputGuard, nftables.ChainTypeFilter, nftables.ChainHookOutput, prioFilter)
	}
	base(chainInput, nftables.ChainTypeFilter, nftables.ChainHookInput, prioFilter)
	base(chainForward, nftables.ChainTypeFilter, nftables.ChainHookForward, prioFilter)
	b.addUDPChains(s)
	b.addTCPChains(s)
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
	if s.TCPTProxy {
		// Handed to the listener by tcp_tproxy (tcp_linux.go): no NAT.
		b.rule(chainVMCapture, metaEq(expr.MetaKeyMARK, native32(s.UDPMark)), verdict(expr.VerdictReturn))
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

	if !s.Local && !s.caged() {
		return
	}
	mark := metaEq(expr.MetaKeyMARK, native32(s.Mark))
	oifLo := metaEq(expr.MetaKeyOIF, native32(loopbackIfindex))
	b.rule(chainOutput, mark, verdict(expr.VerdictReturn))
	b.cagedOutput(s)
	if s.Local {
		b.rule(chainOutput, oifLo, verdict(expr.VerdictReturn))
		if s.DNSPort != 0 {
			b.rule(chainOutput, b.dnsMatch(), redirect(s.DNSPort))
		}
		b.rule(chainOutput, goTo(chainCaptureTCP))
	}

	// output_guard: what the router cannot proxy (UDP such as QUIC, ICMP, other protocols)
	// does not leave this host, but for DHCP and the ports of LocalUDPAllow. Redirected DNS
	// and TCP have been rerouted to lo by the nat chain by now.
	// Without Local it guards the caged sockets alone.
	g := chainOutputGuard
	b.rule(g, mark, verdict(expr.VerdictReturn))
	if !s.Local {
		b.rule(g, metaNe(expr.MetaKeyMARK, native32(s.CagedMark)), verdict(expr.VerdictReturn))
	}
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
	// The later packets of a connection redirected to a listener: every chain below accepts
	// them (antispoof and the listener guard judged the first), so they stop here, one rule
	// in, instead of running the input chain and vm_input or caged_input to their accept.
	est := ctStateIn(expr.CtStateBitESTABLISHED)
	b.rule(chainInput, est, ctStatusDNAT(true), l4proto(unix.IPPROTO_TCP), thDport(s.ListenerPort), verdict(expr.VerdictAccept))
	if s.DNSPort != 0 {
		b.rule(chainInput, est, ctStatusDNAT(true), b.l4protoIn(unix.IPPROTO_TCP, unix.IPPROTO_UDP), thDport(s.DNSPort), verdict(expr.VerdictAccept))
	}
	b.rule(chainInput, jump(chainAntispoof))
	// The listener ports take only redirected connections, from anywhere.
	b.rule(chainInput, l4proto(unix.IPPROTO_TCP), thDport(s.ListenerPort), ctStatusDNAT(false), goTo(reasonChain(refusal.Host)))
	if s.DNSPort != 0 {
		b.rule(chainInput, b.l4protoIn(unix.IPPROTO_TCP, unix.IPPROTO_UDP), thDport(s.DNSPort), ctStatusDNAT(false), goTo(reasonChain(refusal.Host)))
	}
	for i, f := range s.Forwards {
		b.allowOnly(forwardChain(i), f, s.Mark)
	}
	for i, f := range s.Inbounds {
		b.allowOnly(inboundChain(i), f, s.Mark)
	}
	b.cagedInput(s)
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
// chain, which accepts the Allow sources and refuses the rest. The router's own
// connections (its mark, over loopback) pass too: it carries an inbound's client there,
// and the listener judges that client (package router, flow_carried.go).
func (b *builder) allowOnly(chain string, f Forward, mark uint32) {
	b.rule(chainInput, listenMatch(f.Listen.Addr()), l4proto(unix.IPPROTO_TCP), thDport(f.Listen.Port()), goTo(chain))
	if mark != 0 {
		b.rule(chain, iifLo(), metaEq(expr.MetaKeyMARK, native32(mark)), verdict(expr.VerdictAccept))
	}
	allow4, allow6 := byFamily(f.Allow)
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
