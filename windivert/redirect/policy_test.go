package redirect

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
	"github.com/agentcage/router/windivert/packet"
)

// TestSharedCases: the engine treats the shared flows as the policy, the relay and explain
// decide them. What the engine does is read from what it writes: a pass goes out unchanged,
// a reflection comes in to the listener (or the DNS port), a refusal comes back as a RST, a
// drop writes nothing, a DNS query is answered. Cases that come from a VM-facing interface
// with an address outside vm_networks are left out: on Windows VM traffic is a hypervisor
// process's (an app), and no capture here has interfaces.
func TestSharedCases(t *testing.T) {
	// The shared config has a VM network, which Windows refuses (no capture there sees
	// one): it is judged as written, for Linux; the decisions do not depend on the OS.
	dec := parsePolicy(t, "shared.toml", policytest.Config, "linux")
	names := map[netip.Addr]string{policytest.PoolAddr: policytest.PoolName}
	checkCases(t, dec, names, policytest.Cases(), func(c policytest.Case) engineCase {
		ec := engineCase{name: c.Name, flow: c.Flow, why: fmt.Sprintf(" for %s by %q", c.Action, c.Rule)}
		if !c.Flow.FromVM || dec.FromVMNetwork(c.Flow.Src) {
			ec.want = engineAction(c, c.Flow.Network == rules.TCP)
		}
		return ec
	})
}

// TestSpoofCases: the engine decides at the SYN, before the client wrote a name, so it never
// passes a flow that a name from its first bytes could still send direct: it reflects it to
// the router, which reads the name and dials it as its resolver resolves it (the relay's
// TestSpoofCases, transparent path), and refuses only what no name could open.
func TestSpoofCases(t *testing.T) {
	dec := parsePolicy(t, "spoof.toml", policytest.SpoofConfig, "linux")
	checkCases(t, dec, map[netip.Addr]string{}, policytest.SpoofCases(), func(c policytest.SpoofCase) engineCase {
		ec := engineCase{name: c.Name, flow: c.Flow, want: "reflect"}
		switch {
		case c.Paths&policytest.Engine == 0:
			ec.want = ""
		case c.Step == policy.StepHost && c.Action == rules.Block:
			ec.want = "refuse"
		}
		return ec
	})
}

// engineCase is a shared case as the engine's tests take it.
type engineCase struct {
	name string
	flow policy.Flow
	want string // what the engine must do with the flow's first packet (see did); "": not its case
	why  string // the decision, for a failure's message
}

// checkCases runs the first packet of every case's flow (of says the flow and what the
// engine must do) through a new engine deciding by dec: the flow's app, if any, owns it,
// names names the addresses the DNS gave, and the engine answers DNS and reflects TCP DNS to
// its DNS port. Each runs as a subtest that checks what the engine did.
func checkCases[C any](t *testing.T, dec *policy.Policy, names map[netip.Addr]string, cases []C, of func(C) engineCase) {
	t.Helper()
	const dnsPort = 47153
	for i, c := range cases {
		ec := of(c)
		if ec.want == "" {
			continue
		}
		t.Run(ec.name, func(t *testing.T) {
			f := ec.flow
			src := netip.AddrPortFrom(f.Src, uint16(40000+i))
			dst := netip.AddrPortFrom(f.Dst, f.Port)
			lk := &fakeLookup{owners: map[netip.AddrPort]rules.Owner{}}
			if f.App != "" {
				lk.owners[src] = rules.Owner{PID: 7, App: f.App}
			}
			opts := Options{Lookup: lk.lookup, Names: &dnstest.Names{Names: names}, DNS: &fakeDNS{}, DNSPort: dnsPort}
			e, dev, _ := newTest(t, true, dec, opts)
			tcp := f.Network == rules.TCP
			ps := firstPacket(t, e, dev, src, dst, tcp)
			if got := did(ps, dst, tcp, dnsPort); got != ec.want {
				t.Errorf("engine did %s (%v), want %s%s", got, ps, ec.want, ec.why)
			}
		})
	}
}

// engineAction is what the engine must do with a case's first packet.
func engineAction(c policytest.Case, tcp bool) string {
	switch {
	case c.Step == policy.StepDNS && tcp:
		return "reflect-dns"
	case c.Step == policy.StepDNS:
		return "answer"
	case c.Action == rules.Block && tcp:
		return "refuse"
	case c.Action == rules.Block:
		return "drop"
	case c.Action == rules.Direct && c.Flow.Host == "":
		return "pass"
	case tcp:
		return "reflect" // proxied, or a fake IP the router resolves
	}
	return "drop" // UDP cannot be proxied
}

// TestScopeCases: the engine treats the scope's flows as the policy decides them, with
// owners known the Windows way (a connect event names the PID, the resolver the process):
// a caged process's DNS is answered and another's passed unchanged (with [dns] capture =
// "caged"), and without local this host's own flows pass whatever the rules say.
func TestScopeCases(t *testing.T) {
	for _, local := range []bool{true, false} {
		for _, dc := range []string{conf.DNSCaptureCaged, conf.DNSCaptureAll} {
			t.Run(fmt.Sprintf("local=%v,dns=%s", local, dc), func(t *testing.T) {
				dec := scopePolicy(t, local, dc)
				for i, c := range policytest.ScopeCases(local, dc) {
					t.Run(c.Name, func(t *testing.T) {
						pid := uint32(1000 + i)
						res := &fakeResolver{infos: map[uint32]rules.Owner{}}
						if c.Flow.App != "" {
							res.infos[pid] = rules.Owner{PID: int(pid), App: c.Flow.App}
						}
						e, dev, _ := newTest(t, true, dec, Options{Events: newFakeEvents(), Resolver: res, DNS: &fakeDNS{}, DNSPort: 47153})
						src := netip.AddrPortFrom(c.Flow.Src, uint16(40000+i))
						dst := netip.AddrPortFrom(c.Flow.Dst, c.Flow.Port)
						tcp := c.Flow.Network == rules.TCP
						proto := packet.ProtoUDP
						if tcp {
							proto = packet.ProtoTCP
						}
						if !dec.FromVMNetwork(c.Flow.Src) {
							e.Event(SocketEvent{Kind: EventConnect, Proto: proto, Local: src, Remote: dst, PID: pid})
						}
						ps := firstPacket(t, e, dev, src, dst, tcp)
						got := did(ps, dst, tcp, 47153)
						if got == "pass" && (ps[0].src != src || ps[0].dst != dst) {
							t.Errorf("passed %v, want it unchanged", ps[0])
						}
						if want := engineAction(c, tcp); got != want {
							t.Errorf("engine did %s (%v), want %s for %v by %q", got, ps, want, c.Step, c.Rule)
						}
					})
				}
			})
		}
	}
}
