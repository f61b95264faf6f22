package redirect

import (
	"container/list"
	"net/netip"
	"time"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
	"github.com/agentcage/router/windivert/packet"
)

// flowKey is a flow's original 5-tuple as its first packet had it: src is this host's end
// (the app, or a VM behind a TUN), dst the remote end.
type flowKey struct {
	proto    uint8
	src, dst netip.AddrPort
}

// evKey matches a connect event to a packet: the event's local address may be unspecified
// while the socket is not yet bound to one, so it is left out.
type evKey struct {
	proto  uint8
	lport  uint16
	remote netip.AddrPort
}

func (k flowKey) evKey() evKey { return evKey{proto: k.proto, lport: k.src.Port(), remote: k.dst} }

type evEntry struct {
	pid  uint32
	at   int64     // engine time it arrived (expiry)
	seen time.Time // when it happened, by the device (zero: unknown)
}

// flowState is what the packets of a flow get.
//
//	pending ──decide──► pass | reflect | dns | drop | relay   (refuse: the entry is removed)
//	   │                  │
//	   └──expire──►(gone)◄┘ (Idle, UDPIdle, or Linger after RST / FIN both ways)
type flowState uint8

const (
	statePending flowState = iota // held until the owner is known
	statePass                     // sent on unchanged
	stateReflect                  // rewritten to and from the listener
	stateDNS                      // UDP: every datagram answered in process
	stateDrop                     // UDP: every datagram dropped
	stateRelay                    // UDP: every datagram handed to Options.UDP
)

// maxHeld bounds the packets held per pending flow (SYN retransmissions, a burst of UDP).
const maxHeld = 4

// flow is one table entry. All fields are guarded by Engine.mu.
type flow struct {
	key   flowKey
	state flowState

	// stateReflect: peer is the source the listener sees (D:pr), to the listener's
	// address the reflected packets go to (X:L).
	peer, to netip.AddrPort
	// stateRelay: the metadata of the flow's last datagram, for the answers injected back.
	inMeta Meta

	pid        uint32 // from a connect event or the lookup
	pidKnown   bool
	pidAt      time.Time // when the event that named pid happened (zero: unknown)
	owner      rules.Owner
	ownerKnown bool
	verdict    rules.Verdict
	caged      bool           // the decision found the flow caged
	profile    string         // the switched guest's profile that decided it; "" for the default
	why        refusal.Reason // when the verdict refuses or drops it: why

	// Budgets (Options.MaxHostFlows, MaxPending): host says the entry counts in the host's
	// share (hostElem is its place in Engine.hostUDP for UDP), pending in the pending one.
	host     bool
	hostElem *list.Element
	pending  bool

	created, last int64 // engine time (ns)
	closing       bool  // a RST, or a FIN each way, was seen
	finApp        bool  // FIN from the app's side
	finLis        bool  // FIN from the listener (reflected) or the remote end
	rst           bool

	held      []held      // statePending
	stop      func() bool // statePending: the event-wait timer
	resolving bool        // statePending: a worker is looking up the owner
}

type held struct {
	b []byte
	m Meta
}

// action is what happens to the packets of a flow once decided.
type action uint8

const (
	actNone action = iota // nothing (the packet is held, or handled already)
	actPass
	actReflect // to flow.to, from flow.peer
	actRefuse  // TCP: drop, and a RST to the app
	actDrop
	actDNS
	actRelay // UDP: to Options.UDP
)

// track notes the flags of a TCP packet of f; fromApp is the app's direction.
func (f *flow) track(fl uint8, fromApp bool, now int64) {
	f.last = now
	if fl&packet.TCPRst != 0 {
		f.rst = true
	}
	if fl&packet.TCPFin != 0 {
		if fromApp {
			f.finApp = true
		} else {
			f.finLis = true
		}
	}
	// A passed flow is seen in the app's direction only: its own FIN closes it.
	f.closing = f.rst || f.finApp && (f.finLis || f.state == statePass)
}

func (f *flow) hold(p packet.Packet, m Meta) {
	if len(f.held) >= maxHeld {
		return
	}
	f.held = append(f.held, held{b: append([]byte(nil), p.Bytes()...), m: m})
}
