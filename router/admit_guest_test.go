package router

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
)

// TestGuestOf: a VM's guest is its VM network, whatever address in it the flow comes from;
// an address in no VM network is its own guest.
func TestGuestOf(t *testing.T) {
	nets := []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("10.0.3.0/24"), netip.MustParsePrefix("fd00:2::/64")}
	for _, tc := range []struct{ src, want string }{
		{"10.0.2.15", "vm 10.0.2.0/24"},
		{"10.0.2.200", "vm 10.0.2.0/24"},
		{"::ffff:10.0.2.9", "vm 10.0.2.0/24"},
		{"10.0.3.7", "vm 10.0.3.0/24"},
		{"fd00:2::1234", "vm fd00:2::/64"},
		{"192.168.7.7", "vm 192.168.7.7"},
	} {
		if got := guestOf(netip.MustParseAddr(tc.src), nets); got != tc.want {
			t.Errorf("guestOf(%s) = %q; want %q", tc.src, got, tc.want)
		}
	}
}

// TestUDPAssociationsPerGuest: one guest with many addresses (a VM with root owns its whole
// network) cannot take every UDP association: it stops at its share (three quarters of
// them while it is alone), each address at its own limit inside it, and another guest's
// datagrams still get associations.
func TestUDPAssociationsPerGuest(t *testing.T) {
	other := netip.MustParsePrefix("10.0.3.0/24")
	e := newUDPEnvIn(t, []netip.Prefix{vmNet, other}, nil, nil, proxyAll)
	opened := 0
	for host := 1; host <= 40; host++ { // 40 addresses × 40 ports: over 1,024 on the old per-address bounds
		for port := range 40 {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, byte(host)}), uint16(20000+port))
			e.send(src, echo, "x")
		}
	}
	e.r.udp.mu.Lock()
	opened = len(e.r.udp.sessions)
	e.r.udp.mu.Unlock()
	if want := maxUDPSessions - maxUDPSessions/4; opened != want {
		t.Errorf("one guest of 40 addresses opened %d associations; want its share, %d", opened, want)
	}
	t.Logf("one guest, 40 addresses: %d of %d associations (%d refusals over its share)", opened, maxUDPSessions, e.r.book.Count(refusal.Limit))
	e.r.udp.mu.Lock()
	for a, b := range e.r.udp.sources {
		if b.sessions > maxUDPSessionsPerSource {
			t.Errorf("%v holds %d associations; the per-address limit is %d", a, b.sessions, maxUDPSessionsPerSource)
		}
	}
	e.r.udp.mu.Unlock()

	// Another guest (its own VM network) still gets associations: 10 sockets, 10 of them.
	for port := range 10 {
		e.send(netip.AddrPortFrom(netip.MustParseAddr("10.0.3.5"), uint16(30000+port)), echo, fmt.Sprint(port))
	}
	n := 0
	if !wait.Poll(waitFor, func() bool {
		e.r.udp.mu.Lock()
		defer e.r.udp.mu.Unlock()
		n = 0
		for k := range e.r.udp.sessions {
			if other.Contains(k.src.Addr()) {
				n++
			}
		}
		return n == 10
	}) {
		t.Fatalf("the other guest has %d associations of 10", n)
	}
}

// TestInboundSlotsPerGuest: 8 addresses of one guest took all 4,096 slots of an inbound on
// the per-address bound alone; now they stop at the guest's share and another guest's
// clients are admitted. The guest of a client outside vm_networks is the allow entry it is
// in.
func TestInboundSlotsPerGuest(t *testing.T) {
	allow := []netip.Prefix{netip.MustParsePrefix("172.20.0.0/16"), netip.MustParsePrefix("172.20.5.0/24")}
	if g := inboundGuest(netip.MustParseAddr("172.20.5.9"), nil, allow); g != "vm 172.20.5.0/24" {
		t.Errorf("inboundGuest = %q; want the narrowest allow entry", g)
	}
	if g := inboundGuest(netip.MustParseAddr("10.0.2.9"), []netip.Prefix{vmNet}, allow); g != "vm 10.0.2.0/24" {
		t.Errorf("inboundGuest = %q; want the VM network", g)
	}
	a := newInboundAdmission(inboundPerSource, inboundTotal)
	taken := 0
	for host := 1; host <= 8; host++ {
		src := netip.AddrFrom4([4]byte{10, 0, 2, byte(host)})
		for a.take(inboundGuest(src, []netip.Prefix{vmNet}, nil), src) {
			taken++
		}
	}
	if want := inboundTotal - inboundTotal/4; taken != want {
		t.Errorf("one guest of 8 addresses took %d slots; want its share, %d", taken, want)
	}
	other := netip.MustParseAddr("172.20.5.9")
	n := 0
	for a.take(inboundGuest(other, []netip.Prefix{vmNet}, allow), other) {
		n++
	}
	if n != inboundPerSource {
		t.Errorf("another guest's client took %d slots; want its per-address limit, %d", n, inboundPerSource)
	}
	t.Logf("inbound: one guest of 8 addresses holds %d of %d slots; another guest's client got %d", taken, inboundTotal, n)
}

// TestIdleInboundsInTheirBudget: under a low descriptor limit (nofile 3,000), 1,024 idle
// connections to an inbound used to be outside every budget and took the process to its
// limit. Now they stop at the inbounds' share (a 32nd of the limit, two descriptors a
// connection), the rest are reset at accept, and a transparent flow is still carried.
func TestIdleInboundsInTheirBudget(t *testing.T) {
	target := startTarget(t, "hello\n")
	e := newEnv(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Direct})}, Options{Descriptors: 3000})
	addr := e.startInbound(Inbound{Type: InboundSOCKS5})
	budget := budgetFor(3000)
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range 1024 {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			continue
		}
		conns = append(conns, c)
	}
	// The accepts: the held ones, then the refusals of the rest.
	_ = wait.Poll(waitFor, func() bool {
		return e.r.Budgets().Inbounds >= budget.inbounds && e.r.book.Count(refusal.Limit) >= uint64(1024-budget.inbounds)
	})
	b := e.r.Budgets()
	if b.Inbounds != budget.inbounds || b.InboundBudget != budget.inbounds {
		t.Errorf("inbounds hold %d of %d; want their budget, %d", b.Inbounds, b.InboundBudget, budget.inbounds)
	}
	if n := e.r.book.Count(refusal.Limit); n < uint64(1024-budget.inbounds) {
		t.Errorf("%d limit refusals; want the %d connections over the budget", n, 1024-budget.inbounds)
	}
	c := e.dial(target)
	if got := readN(t, c, 6); got != "hello\n" {
		t.Errorf("a transparent flow beside the flood: banner %q", got)
	}
	t.Logf("nofile 3000: flows %d, forwards %d, inbounds %d connections (%d descriptors); 1,024 idle inbound connections: %d held, %d refused",
		budget.flows, budget.forwards, budget.inbounds, 2*budget.inbounds, b.Inbounds, e.r.book.Count(refusal.Limit))
}
