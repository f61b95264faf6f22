package nftcap

import (
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/ports"
)

// The TCP capture by TPROXY (Spec.TCPTProxy): a VM's TCP is handed to the transparent
// listener on ListenerPort unchanged, without NAT, the way the UDP capture hands datagrams
// over (udp_linux.go), with the same mark (UDPMark) and the same policy routing
// (udp_route_linux.go). The accepted connection's local address is its original
// destination.
const (
	chainTCPPrerouting = "tcp_prerouting" // filter, prerouting, mangle: which VM TCP is handed over
	chainTCPVM         = "tcp_vm"         // antispoof, local destinations stay
	chainTCPTProxy     = "tcp_tproxy"     // TPROXY to ListenerPort, mark UDPMark
)

// addTCPChains queues the TCP capture's chains (none without TCPTProxy).
func (b *builder) addTCPChains(s Spec) {
	if !s.TCPTProxy {
		return
	}
	for _, name := range []string{chainTCPVM, chainTCPTProxy} {
		b.chains[name] = b.c.AddChain(&nftables.Chain{Name: name, Table: b.t})
	}
	accept := nftables.ChainPolicyAccept
	b.chains[chainTCPPrerouting] = b.c.AddChain(&nftables.Chain{
		Name: chainTCPPrerouting, Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle, Policy: &accept,
	})
}

// tcpCapture queues the TCP capture's rules:
//
//	tcp_prerouting  filter, hook prerouting, priority mangle (before the nat chains)
//	  not tcp / iif lo                     return   (the host's own: the nat output chain)
//	  tcp dport {53, L}                    return   (left to the nat chain's redirects, see below)
//	  ip saddr @vm4 / ip6 saddr @vm6 / iifname (each VMInterface)  goto tcp_vm
//	tcp_vm
//	  jump antispoof
//	  fib daddr type {local,broadcast,multicast}  return   (the host: input decides)
//	  ip daddr / ip6 daddr (local prefixes)       return
//	  goto tcp_tproxy
//	tcp_tproxy
//	  meta nfproto ipv4 tproxy ip to :L meta mark set UDPMark accept
//	  meta nfproto ipv6 tproxy ip6 to :L meta mark set UDPMark accept
//	vm_capture (nat, before capture_tcp)
//	  meta mark UDPMark                    return   (handed over: no NAT)
//	input (first rule)
//	  meta mark UDPMark                    accept
//
// TPROXY finds no transparent socket when the router is down (or listens without
// IP_TRANSPARENT): the rule does not match, no mark is set, and the nat chain redirects the
// connection to :L as without TCPTProxy (a reset when nobody listens). DNS is redirected to
// DNSPort as before. Port L is redirected too: a connection TPROXY hands over has its
// original destination as local address, and only on the listener's own port could that
// be a connection made to the listener itself; a redirected one never is (its original
// destination is not its local address).
func (b *builder) tcpCapture(s Spec, vm vmSets) {
	if !s.TCPTProxy {
		return
	}
	p := chainTCPPrerouting
	b.rule(p, metaNe(expr.MetaKeyL4PROTO, []byte{unix.IPPROTO_TCP}), verdict(expr.VerdictReturn))
	b.rule(p, iifLo(), verdict(expr.VerdictReturn))
	b.rule(p, b.thDportIn(ports.DNS, s.ListenerPort), verdict(expr.VerdictReturn))
	b.rule(p, saddrIn(vm.v4, false), goTo(chainTCPVM))
	b.rule(p, saddrIn(vm.v6, true), goTo(chainTCPVM))
	for _, i := range s.VMInterfaces {
		b.rule(p, ifname(expr.MetaKeyIIFNAME, i), goTo(chainTCPVM))
	}

	// The checks of the first packet: the later ones go straight to tcp_tproxy, which hands
	// over only those of a flow it handed over (the listener's connection) and leaves alone
	// those of the flows to this host (their sockets are not transparent).
	b.rule(chainTCPVM, ctStateIn(expr.CtStateBitESTABLISHED), goTo(chainTCPTProxy))
	b.rule(chainTCPVM, jump(chainAntispoof))
	b.notLocalDst(chainTCPVM)
	b.rule(chainTCPVM, goTo(chainTCPTProxy))

	b.tproxyTo(chainTCPTProxy, s.ListenerPort, s.UDPMark)
}
