package redirect

import (
	"net/netip"

	"github.com/agentcage/router/windivert/packet"
)

// ICMP echo requests are the only ICMP the engine takes (WinDivert's EchoRequests filter):
// no proxy carries ICMP, so an echo request leaves only when the policy says it is this
// host's own (policy.DecideICMP); a caged process's, or one whose process is unknown, is
// dropped. An echo request is a flow like a UDP datagram's: its key puts the ICMP type where
// the source port would be and the code where the destination port would be, which is
// where Windows puts them in a socket event, so the SOCKET layer's connect event names its
// process the same way.

// echoRequest reports whether p is an ICMP or ICMPv6 echo request, with its type and code.
func echoRequest(p packet.Packet) (typ, code uint8, ok bool) {
	typ, code, ok = p.ICMP()
	if !ok || (p.Protocol() == packet.ProtoICMP && typ != 8) || (p.Protocol() == packet.ProtoICMPv6 && typ != 128) {
		return 0, 0, false
	}
	return typ, code, true
}

func isICMP(proto uint8) bool { return proto == packet.ProtoICMP || proto == packet.ProtoICMPv6 }

// icmp handles an outbound echo request.
func (e *Engine) icmp(ob *outbox, p packet.Packet, m Meta, typ, code uint8, now int64) {
	key := flowKey{proto: p.Protocol(), src: netip.AddrPortFrom(p.Src(), uint16(typ)), dst: netip.AddrPortFrom(p.Dst(), uint16(code))}
	e.datagram(ob, p, m, key, now)
}
