// Package refusal names and counts what the cage refused, and keeps the last few refused
// destinations of each reason, so that `router status`, `router watch` and the metrics can
// say what was stopped and why.
//
// Refusals happen in three places: the router (a flow it decided to refuse, or could not
// carry because the upstream is down), the Windows engine (packets it dropped before any
// connection existed: guest UDP, ICMP, IPv6) and, on Linux, the kernel (nftables rules that
// drop such packets; those are counted by nftables counters and merged in by the daemon).
// A [Book] is the in-process part: counters per reason and a small ring per reason.
package refusal

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/rules/policy"
)

// Reason is why something was refused. The zero Reason is Rule.
type Reason uint8

const (
	Rule          Reason = iota // a block rule decided
	Caged                       // a caged flow that no rule decides
	Host                        // a caged flow to this host or its link that the host walls refuse
	NoName                      // a fake-IP pool address nobody was given
	DoT                         // DNS over TLS/QUIC that would have left direct
	UpstreamDown                // the proxy the flow was decided for could not be reached
	GuestUDP                    // UDP from the cage that is not DNS and is not proxied
	ICMP                        // ICMP from the cage, or from this host with local capture (the router cannot carry it)
	ForwardSource               // a forward (or inbound proxy) connection from a source it does not allow
	DNS                         // a DNS query refused (a name that is an IP literal, a refused type, over limits)
	Capture                     // a capture fault: a connection that should never have reached the listener
	Limit                       // over a limit (flow set-ups, descriptors): refused to keep the others going
	Spoofed                     // a new flow from the cage whose source address does not route back where it came from
	LocalUDP                    // this host's own UDP, with local capture (the router cannot carry it)
	NotCarried                  // from the cage, what the router cannot carry: protocols other than TCP, UDP and ICMP, TCP to link-local or multicast destinations
	ToGuest                     // a connection from outside into a VM network, or a caged flow to another guest's network no rule names
	ModelAPI                    // a request to a model forward that is not an inference call of its API, or whose framing is ambiguous
	DoH                         // a caged flow to a well-known DNS-over-HTTPS endpoint
	NameMismatch                // a fake IP's flow whose first bytes (TLS server name, HTTP Host) ask for another name
	QUIC                        // caged UDP to port 443 where the rules allow by name and no rule is written for UDP
	Oversize                    // a UDP datagram a path cannot carry whole (dropped whole, never cut)
	Malformed                   // an inbound proxy request that is not well-formed SOCKS or HTTP
	InboundDNS                  // DNS sent to an inbound proxy (the cage's DNS server answers names; the inbound does not carry DNS)
	AskDenied                   // a flow held under ask that was denied, not answered in time, over the held bounds, or unattended
	Budget                      // past a guest's budget for one registrable domain ([budget]: distinct names, or bytes up, per window)
	Canary                      // a brokered credential's placeholder where it must not go ([[credential]])
	numReasons
)

var names = [numReasons]string{
	Rule:          "rule",
	Caged:         "caged-no-rule",
	Host:          "host-off-limits",
	NoName:        "fake-ip-unknown",
	DoT:           "dot-direct",
	UpstreamDown:  "upstream-down",
	GuestUDP:      "guest-udp",
	ICMP:          "icmp",
	ForwardSource: "forward-source",
	DNS:           "dns",
	Capture:       "capture-fault",
	Limit:         "limit",
	Spoofed:       "spoofed-source",
	LocalUDP:      "local-udp",
	NotCarried:    "not-carried",
	ToGuest:       "to-guest",
	ModelAPI:      "model-api",
	DoH:           "doh",
	NameMismatch:  "name-mismatch",
	QUIC:          "quic",
	Oversize:      "udp-oversize",
	Malformed:     "inbound-malformed",
	InboundDNS:    "inbound-dns",
	AskDenied:     "ask-denied",
	Budget:        "budget",
	Canary:        "canary",
}

// String is the reason's name in status, logs and metrics labels: lower case, with dashes.
func (r Reason) String() string {
	if r < numReasons {
		return names[r]
	}
	return "unknown"
}

// Parse returns the reason named s.
func Parse(s string) (Reason, bool) {
	i := slices.Index(names[:], s)
	return Reason(i), i >= 0
}

// All returns every reason, in order.
func All() []Reason {
	rs := make([]Reason, numReasons)
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}

// ForStep is the reason of a refusal the policy decided at step s: the step that refused,
// or Rule for a block rule. StepDNS refuses only as a capture fault (a DNS flow that
// reached the router's listener instead of its DNS server).
func ForStep(s policy.Step) Reason {
	switch s {
	case policy.StepHost, policy.StepHostName:
		return Host
	case policy.StepToGuest:
		return ToGuest
	case policy.StepNoName:
		return NoName
	case policy.StepCaged:
		return Caged
	case policy.StepDoT:
		return DoT
	case policy.StepDoH:
		return DoH
	case policy.StepNameMismatch:
		return NameMismatch
	case policy.StepQUIC:
		return QUIC
	case policy.StepUnattended, policy.StepAsk:
		return AskDenied
	case policy.StepDNS:
		return Capture
	case policy.StepICMP:
		return ICMP
	case policy.StepCanary:
		return Canary
	}
	return Rule
}

// ForInbound is ForStep for a flow an inbound proxy's client asked for: DNS there is not a
// capture fault but a client asking the inbound for port 53 (InboundDNS).
func ForInbound(s policy.Step) Reason {
	if s == policy.StepDNS {
		return InboundDNS
	}
	return ForStep(s)
}

// Event is one refusal, as the ring keeps it.
type Event struct {
	At   time.Time
	Src  netip.AddrPort
	Dst  netip.AddrPort
	Host string // the destination's name, when known
	App  string // the process, when known
	Rule string // the rule or implicit step that refused, when one did
	// Request is a refused HTTP request's method and path ("POST /api/pull"), for model-api
	// refusals: never its query, headers or body.
	Request string
}

// Stat is one reason's count and its latest events, newest first.
type Stat struct {
	Reason Reason
	Count  uint64
	Recent []Event
}

// RingSize is how many events a Book keeps per reason.
const RingSize = 16

// Book counts refusals. The zero Book is ready; its methods are safe for concurrent use.
// Counting is one atomic add; keeping the event takes a short lock, once per refusal (a
// refusal ends a flow or drops a packet, it is never on the relay's path).
type Book struct {
	counts [numReasons]atomic.Uint64
	mu     sync.Mutex
	rings  [numReasons]ring // guarded by mu
}

type ring struct {
	ev   [RingSize]Event
	next int // where the next event goes
	n    int // events kept, up to RingSize
}

// Add counts one refusal for r and keeps e (At is set to now when zero).
func (b *Book) Add(r Reason, e Event) {
	if r >= numReasons {
		return
	}
	b.counts[r].Add(1)
	if e.At.IsZero() {
		e.At = time.Now()
	}
	b.mu.Lock()
	b.rings[r].add(e)
	b.mu.Unlock()
}

// Note keeps e in r's ring without counting it: for refusals counted elsewhere (the
// kernel's counters), whose events arrive apart and maybe not all of them.
func (b *Book) Note(r Reason, e Event) {
	if r >= numReasons {
		return
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	b.mu.Lock()
	b.rings[r].add(e)
	b.mu.Unlock()
}

// Recent returns r's latest events, newest first.
func (b *Book) Recent(r Reason) []Event {
	if r >= numReasons {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rings[r].events()
}

func (g *ring) add(e Event) {
	g.ev[g.next] = e
	g.next = (g.next + 1) % RingSize
	g.n = min(g.n+1, RingSize)
}

// events returns the ring's events, newest first.
func (g *ring) events() []Event {
	out := make([]Event, 0, g.n)
	for i := 1; i <= g.n; i++ {
		out = append(out, g.ev[(g.next-i+RingSize)%RingSize])
	}
	return out
}

// Count returns the refusals counted for r.
func (b *Book) Count(r Reason) uint64 {
	if r >= numReasons {
		return 0
	}
	return b.counts[r].Load()
}

// Snapshot returns the reasons with a count, in Reason order, each with its latest events
// (newest first).
func (b *Book) Snapshot() []Stat {
	var out []Stat
	b.mu.Lock()
	defer b.mu.Unlock()
	for r := range numReasons {
		n := b.counts[r].Load()
		if n == 0 {
			continue
		}
		out = append(out, Stat{Reason: r, Count: n, Recent: b.rings[r].events()})
	}
	return out
}

// Merge adds the counts and events of more into stats (both in Reason order, as Snapshot
// returns them) and returns the result in Reason order; events are merged newest first and
// cut to RingSize. It combines the router's Book with the kernel's or the engine's counts.
func Merge(stats []Stat, more ...[]Stat) []Stat {
	var by [numReasons]*Stat
	var out []Stat
	for _, list := range append([][]Stat{stats}, more...) {
		for _, s := range list {
			if s.Reason >= numReasons {
				continue
			}
			if by[s.Reason] == nil {
				by[s.Reason] = &Stat{Reason: s.Reason}
			}
			t := by[s.Reason]
			t.Count += s.Count
			t.Recent = append(t.Recent, s.Recent...)
		}
	}
	for _, s := range by {
		if s == nil {
			continue
		}
		slices.SortStableFunc(s.Recent, func(a, b Event) int { return b.At.Compare(a.At) })
		if len(s.Recent) > RingSize {
			s.Recent = s.Recent[:RingSize]
		}
		out = append(out, *s)
	}
	return out
}
