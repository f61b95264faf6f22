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
	cfg, err := conf.Parse("shared.toml", []byte(policytest.Config), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	dec := policy.New(cfg, policytest.Env())
	const dnsPort = 47153
	for i, c := range policytest.Cases() {
		if c.Flow.FromVM && !dec.FromVMNetwork(c.Flow.Src) {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			src := netip.AddrPortFrom(c.Flow.Src, uint16(40000+i))
			dst := netip.AddrPortFrom(c.Flow.Dst, c.Flow.Port)
			lk := &fakeLookup{owners: map[netip.AddrPort]rules.Owner{}}
			if c.Flow.App != "" {
				lk.owners[src] = rules.Owner{PID: 7, App: c.Flow.App}
			}
			names := &dnstest.Names{Names: map[netip.Addr]string{policytest.PoolAddr: policytest.PoolName}}
			e, dev, _ := newTest(t, true, dec, Options{Lookup: lk.lookup, Names: names, DNS: &fakeDNS{}, DNSPort: dnsPort})
			tcp := c.Flow.Network == rules.TCP
			b := udpPkt(src, dst, "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00")
			if tcp {
				b = tcpPkt(src, dst, syn, 1, 0, "")
			}
			send(e, b, outMeta)
			ps := decode(t, dev.take())
			var got string
			switch {
			case len(ps) == 0:
				got = "drop"
			case ps[0].m.Outbound:
				got = "pass"
			case ps[0].flags&packet.TCPRst != 0:
				got = "refuse"
			case !tcp && ps[0].src == dst:
				got = "answer"
			case ps[0].dst.Port() == dnsPort:
				got = "reflect-dns"
			default:
				got = "reflect"
			}
			if want := engineAction(c, tcp); got != want {
				t.Errorf("engine did %s (%v), want %s for %s by %q", got, ps, want, c.Action, c.Rule)
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
				cfg, err := conf.Parse("scope.toml", []byte(policytest.ScopeConfig(local, dc)), conf.Options{SkipSecrets: true, OS: "windows"})
				if err != nil {
					t.Fatal(err)
				}
				dec := policy.New(cfg, policytest.Env())
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
						b := udpPkt(src, dst, "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00")
						if tcp {
							proto = packet.ProtoTCP
							b = tcpPkt(src, dst, syn, 1, 0, "")
						}
						if !dec.FromVMNetwork(c.Flow.Src) {
							e.Event(SocketEvent{Kind: EventConnect, Proto: proto, Local: src, Remote: dst, PID: pid})
						}
						send(e, b, outMeta)
						ps := decode(t, dev.take())
						var got string
						switch {
						case len(ps) == 0:
							got = "drop"
						case ps[0].m.Outbound:
							got = "pass"
							if ps[0].src != src || ps[0].dst != dst {
								t.Errorf("passed %v, want it unchanged", ps[0])
							}
						case ps[0].flags&packet.TCPRst != 0:
							got = "refuse"
						case !tcp && ps[0].src == dst:
							got = "answer"
						case ps[0].dst.Port() == 47153:
							got = "reflect-dns"
						default:
							got = "reflect"
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
