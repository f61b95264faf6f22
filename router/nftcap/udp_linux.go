package nftcap

import (
	"encoding/binary"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/ports"
	"github.com/agentcage/router/rules/refusal"
)

// The UDP capture's chains (Spec.UDPPort). TPROXY hands a datagram to the router's
// transparent socket without rewriting it, so the router reads its original destination and
// answers from it; the mark it sets routes the datagram to this host (policy routing, see
// udp_route_linux.go).
const (
	chainUDPPrerouting = "udp_prerouting" // filter, prerouting, mangle: who is captured
	chainUDPVM         = "udp_vm"         // a VM's datagram: antispoof, local destinations stay
	chainUDPTProxy     = "udp_tproxy"     // TPROXY to UDPPort, mark UDPMark
	chainUDPOutput     = "udp_output"     // route, output, mangle (Local): mark own UDP to reroute it to lo
)

// addUDPChains queues the UDP capture's chains (none without UDPPort).
func (b *builder) addUDPChains(s Spec) {
	if s.UDPPort == 0 {
		return
	}
	accept := nftables.ChainPolicyAccept
	for _, name := range []string{chainUDPVM, chainUDPTProxy} {
		b.chains[name] = b.c.AddChain(&nftables.Chain{Name: name, Table: b.t})
	}
	b.chains[chainUDPPrerouting] = b.c.AddChain(&nftables.Chain{
		Name: chainUDPPrerouting, Table: b.t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle, Policy: &accept,
	})
	if s.Local || s.caged() {
		b.chains[chainUDPOutput] = b.c.AddChain(&nftables.Chain{
			Name: chainUDPOutput, Table: b.t, Type: nftables.ChainTypeRoute,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityMangle, Policy: &accept,
		})
	}
}

// udpCapture queues the UDP capture's rules:
//
//	udp_prerouting  filter, hook prerouting, priority mangle (before the nat chains)
//	  not udp                              return
//	  iif lo meta mark UDPMark             goto udp_tproxy   (Local: rerouted by udp_output)
//	  iif lo                               return
//	  udp dport 53                         return   (DNS: the nat chain redirects it)
//	  ip saddr @vm4 / ip6 saddr @vm6 / iifname (each VMInterface)  goto udp_vm
//	udp_vm
//	  jump antispoof
//	  fib daddr type {local,broadcast,multicast}  return   (DHCP, the host: input decides)
//	  ip daddr / ip6 daddr (local prefixes)       return
//	  goto udp_tproxy
//	udp_tproxy
//	  meta nfproto ipv4 tproxy ip to :UDPPort meta mark set UDPMark accept
//	  meta nfproto ipv6 tproxy ip6 to :UDPPort meta mark set UDPMark accept
//	  (no socket listens: the rule does not match, the datagram goes on and is refused)
//	input (first rules)
//	  meta mark UDPMark                    accept   (handed to the router's socket)
//	  udp dport UDPPort                    goto refuse  (anything else sent to it)
//	udp_output      route, hook output, priority mangle (Local)
//	  not udp / meta mark M / oif lo       return
//	  udp dport {53, 67, 68, 546, 547, LocalUDPAllow}  return
//	  fib daddr type {local,broadcast,multicast}; local prefixes  return
//	  meta mark set UDPMark                (rerouted: lo, then udp_prerouting)
func (b *builder) udpCapture(s Spec, vm vmSets) {
	if s.UDPPort == 0 {
		return
	}
	udpMark := metaEq(expr.MetaKeyMARK, native32(s.UDPMark))
	p := chainUDPPrerouting
	b.rule(p, metaNe(expr.MetaKeyL4PROTO, []byte{unix.IPPROTO_UDP}), verdict(expr.VerdictReturn))
	if s.Local || s.caged() {
		b.rule(p, iifLo(), udpMark, goTo(chainUDPTProxy))
	}
	b.cagedUDPPrerouting(s)
	b.rule(p, iifLo(), verdict(expr.VerdictReturn))
	b.rule(p, thDport(ports.DNS), verdict(expr.VerdictReturn))
	b.rule(p, saddrIn(vm.v4, false), goTo(chainUDPVM))
	b.rule(p, saddrIn(vm.v6, true), goTo(chainUDPVM))
	for _, i := range s.VMInterfaces {
		b.rule(p, ifname(expr.MetaKeyIIFNAME, i), goTo(chainUDPVM))
	}

	b.rule(chainUDPVM, jump(chainAntispoof))
	b.notLocalDst(chainUDPVM)
	b.rule(chainUDPVM, goTo(chainUDPTProxy))

	b.tproxyTo(chainUDPTProxy, s.UDPPort, s.UDPMark)

	if !s.Local && !s.caged() {
		return
	}
	o := chainUDPOutput
	b.rule(o, metaNe(expr.MetaKeyL4PROTO, []byte{unix.IPPROTO_UDP}), verdict(expr.VerdictReturn))
	b.rule(o, metaEq(expr.MetaKeyMARK, native32(s.Mark)), verdict(expr.VerdictReturn))
	b.rule(o, metaEq(expr.MetaKeyOIF, native32(loopbackIfindex)), verdict(expr.VerdictReturn))
	b.cagedUDPOutput(s)
	if !s.Local {
		return
	}
	b.rule(o, b.thDportIn(append(append([]uint16{ports.DNS}, ports.DHCP()...), s.LocalUDPAllow...)...), verdict(expr.VerdictReturn))
	b.notLocalDst(o)
	b.rule(o, setMark(s.UDPMark))
}

// notLocalDst queues the rules that return from chain for destinations capture never takes:
// what fib calls local, broadcast or multicast, and the policy's local prefixes.
func (b *builder) notLocalDst(chain string) {
	b.rule(chain, b.fibDaddrTypeIn(unix.RTN_LOCAL, unix.RTN_BROADCAST, unix.RTN_MULTICAST), verdict(expr.VerdictReturn))
	b.rule(chain, nfproto(unix.NFPROTO_IPV4), daddr(false), b.anonPrefixSet(false, notCaptured(false)), verdict(expr.VerdictReturn))
	b.rule(chain, nfproto(unix.NFPROTO_IPV6), daddr(true), b.anonPrefixSet(true, notCaptured(true)), verdict(expr.VerdictReturn))
}

// udpInput queues, first in the input chain, the acceptance of the datagrams TPROXY handed
// to the router's socket: they carry UDPMark, which only udp_tproxy sets (after the
// antispoof check), and go to that socket only. Any other datagram to UDPPort, from
// anywhere, is refused: the socket takes only what TPROXY hands it.
//
// With TCPTProxy the same mark accepts the TCP that tcp_tproxy handed to the listener.
func (b *builder) udpInput(s Spec) {
	if s.tproxied() {
		b.rule(chainInput, metaEq(expr.MetaKeyMARK, native32(s.UDPMark)), verdict(expr.VerdictAccept))
	}
	if s.UDPPort != 0 {
		b.rule(chainInput, l4proto(unix.IPPROTO_UDP), thDport(s.UDPPort), goTo(reasonChain(refusal.Host)))
	}
}

// udpOutputGuard queues, in output_guard, the return of this host's UDP that udp_output
// marked: it is rerouted to lo and captured, not sent.
func (b *builder) udpOutputGuard(s Spec) {
	if s.UDPPort == 0 {
		return
	}
	b.rule(chainOutputGuard, metaEq(expr.MetaKeyMARK, native32(s.UDPMark)), verdict(expr.VerdictReturn))
}

// setMark sets the packet's mark.
func setMark(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: native32(mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
}

// tproxyTo fills chain with the TPROXY hand-over to port on this host, for both families:
// the packet goes to the transparent socket listening there, marked mark (which the policy
// route delivers locally), and is accepted.
func (b *builder) tproxyTo(chain string, port uint16, mark uint32) {
	p := binary.BigEndian.AppendUint16(nil, port)
	for _, fam := range []byte{unix.NFPROTO_IPV4, unix.NFPROTO_IPV6} {
		b.rule(chain, nfproto(fam),
			&expr.Immediate{Register: 1, Data: p},
			&expr.TProxy{Family: fam, TableFamily: byte(nftables.TableFamilyINet), RegPort: 1},
			setMark(mark), verdict(expr.VerdictAccept))
	}
}
