package redirect

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/agentcage/router/windivert/packet"

	"github.com/agentcage/router/rules"
)

// UDPRelay carries the UDP flows the engine does not pass or drop itself: a proxy verdict,
// a fake-IP destination, a decision that a host-name rule could still change (the router
// decides again with the name). The router implements it (router.HandleUDP, through the
// daemon): proxied datagrams go through an association of the upstream, never direct.
//
// RelayUDP is called on the engine's read loop for every datagram of such a flow, so it must
// not block (it queues or drops) and must not keep payload. The relay sends answers back
// with the engine's ReplyUDP, as if from the flow's destination.
type UDPRelay interface {
	RelayUDP(f UDPFlow, payload []byte)
}

// UDPFlow is what the engine knows of a relayed UDP flow: the app's address, the original
// destination, and the owner when it is known.
type UDPFlow struct {
	Src, Dst   netip.AddrPort
	Owner      rules.Owner
	OwnerKnown bool
}

// relay hands p, a datagram of the relayed flow o was decided for, to Options.UDP.
func (e *Engine) relay(o outcome, p packet.Packet) {
	if e.opts.UDP == nil {
		e.st.dropped.Add(1)
		return
	}
	e.st.udpRelayed.Add(1)
	e.opts.UDP.RelayUDP(UDPFlow{
		Src: netip.AddrPortFrom(p.Src(), p.SrcPort()), Dst: netip.AddrPortFrom(p.Dst(), p.DstPort()),
		Owner: o.owner, OwnerKnown: o.ownerKnown,
	}, p.Payload())
}

// ReplyUDP injects p into the host as a datagram from `from` to client: the answer to a
// relayed flow client → from. It fails when no such flow is in the table (it expired, or
// never was relayed): the engine answers only flows it handed over, on the interface their
// packets came from.
func (e *Engine) ReplyUDP(client, from netip.AddrPort, p []byte) error {
	key := flowKey{proto: packet.ProtoUDP, src: unmapAP(client), dst: unmapAP(from)}
	e.mu.Lock()
	f := e.flows[key]
	var m Meta
	ok := f != nil && f.state == stateRelay
	if ok {
		m = f.inMeta
	}
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("redirect: reply to %v from %v: %w", client, from, errNoRelayedFlow)
	}
	b, err := packet.Build(packet.Spec{Src: key.dst, Dst: key.src, Proto: packet.ProtoUDP, Payload: p})
	if err != nil {
		return fmt.Errorf("redirect: reply to %v from %v: %w", client, from, err)
	}
	e.write(b, m)
	return nil
}

var errNoRelayedFlow = errors.New("no relayed udp flow")
