package nftcap

import (
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/ports"
	"github.com/agentcage/router/rules/refusal"
)

// This file builds what the table does with the sockets of caged processes (Spec.CagedApps),
// which carry CagedMark from their creation on (package cagemark): they are captured
// whatever Spec.Local says, loopback and this host's own addresses included.
//
//	output (nat, before "oif lo return")
//	  meta mark C                          goto caged_output
//	caged_output
//	  udp|tcp dport 53                     redirect to :D   (any address: 127.0.0.53 too)
//	  tcp, fib daddr local, a forward's or inbound's listen address and port  return
//	  tcp                                  redirect to :L   (every destination)
//	input (after the forwards and inbounds, before "iif lo accept")
//	  iif lo meta mark C                   goto caged_input
//	caged_input   what a caged process may reach on this host
//	  ct state established,related ct direction reply  accept  (its answers)
//	  tcp dport L; udp|tcp dport D         accept   (redirected: the input chain refused
//	                                                  the rest before)
//	  goto refuse_host_off_limits
//	udp_prerouting (with UDPPort)
//	  iif lo meta mark C ct status dnat    return   (DNS redirected to D)
//	  iif lo meta mark C                   goto udp_tproxy  (loopback, this host)
//	udp_output (with UDPPort)
//	  meta mark C                          goto udp_caged  (before Local's exemptions)
//	udp_caged
//	  udp dport 53                         return   (the nat chain redirects it)
//	  local destinations                   return   (udp_prerouting takes them on lo)
//	  meta mark set UDPMark                (rerouted: lo, then udp_prerouting)
//
// With nobody listening (the guard alone) the redirected TCP is reset, DNS refused, and
// UDP that TPROXY found no socket for reaches caged_input with its mark and is refused.
const (
	chainCagedOutput = "caged_output" // nat: a caged socket's DNS and TCP to the router
	chainCagedInput  = "caged_input"  // filter: what a caged socket may reach on this host
	chainUDPCaged    = "udp_caged"    // route: a caged socket's UDP rerouted to the router
)

// addCagedChains queues the caged chains (none without CagedApps).
func (b *builder) addCagedChains(s Spec) {
	if !s.caged() {
		return
	}
	for _, name := range []string{chainCagedOutput, chainCagedInput} {
		b.chains[name] = b.c.AddChain(&nftables.Chain{Name: name, Table: b.t})
	}
	if s.UDPPort != 0 {
		b.chains[chainUDPCaged] = b.c.AddChain(&nftables.Chain{Name: chainUDPCaged, Table: b.t})
	}
}

func (b *builder) cagedMark(s Spec) []expr.Any {
	return metaEq(expr.MetaKeyMARK, native32(s.CagedMark))
}

// cagedOutput queues, in the nat output chain, the capture of the caged sockets, and
// caged_output.
func (b *builder) cagedOutput(s Spec) {
	if !s.caged() {
		return
	}
	b.rule(chainOutput, b.cagedMark(s), goTo(chainCagedOutput))
	c := chainCagedOutput
	if s.DNSPort != 0 {
		b.rule(c, b.dnsMatch(), redirect(s.DNSPort))
	}
	for _, f := range append(append([]Forward(nil), s.Forwards...), s.Inbounds...) {
		b.rule(c, l4proto(unix.IPPROTO_TCP), b.fibDaddrTypeIn(unix.RTN_LOCAL), listenMatch(f.Listen.Addr()),
			thDport(f.Listen.Port()), verdict(expr.VerdictReturn))
	}
	b.rule(c, l4proto(unix.IPPROTO_TCP), redirect(s.ListenerPort))
}

// cagedInput queues, in the input chain, the guard of this host against the caged sockets,
// and caged_input.
func (b *builder) cagedInput(s Spec) {
	if !s.caged() {
		return
	}
	b.rule(chainInput, iifLo(), b.cagedMark(s), goTo(chainCagedInput))
	c := chainCagedInput
	b.rule(c, ctStateIn(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), ctDirection(ctDirReply), verdict(expr.VerdictAccept))
	b.rule(c, l4proto(unix.IPPROTO_TCP), thDport(s.ListenerPort), verdict(expr.VerdictAccept))
	if s.DNSPort != 0 {
		b.rule(c, b.l4protoIn(unix.IPPROTO_TCP, unix.IPPROTO_UDP), thDport(s.DNSPort), verdict(expr.VerdictAccept))
	}
	b.rule(c, goTo(reasonChain(refusal.Host)))
}

// cagedUDPPrerouting queues, in udp_prerouting, the hand-over of the caged sockets' UDP to
// this host's addresses (it arrives on lo with CagedMark).
func (b *builder) cagedUDPPrerouting(s Spec) {
	if !s.caged() {
		return
	}
	b.rule(chainUDPPrerouting, iifLo(), b.cagedMark(s), ctStatusDNAT(true), verdict(expr.VerdictReturn))
	b.rule(chainUDPPrerouting, iifLo(), b.cagedMark(s), goTo(chainUDPTProxy))
}

// cagedUDPOutput queues, in udp_output, the rerouting of the caged sockets' UDP to other
// hosts, and udp_caged.
func (b *builder) cagedUDPOutput(s Spec) {
	if !s.caged() {
		return
	}
	b.rule(chainUDPOutput, b.cagedMark(s), goTo(chainUDPCaged))
	b.rule(chainUDPCaged, thDport(ports.DNS), verdict(expr.VerdictReturn))
	b.notLocalDst(chainUDPCaged)
	b.rule(chainUDPCaged, setMark(s.UDPMark))
}
