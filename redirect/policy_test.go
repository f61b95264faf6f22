package redirect

import (
	"net/netip"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/packet"
	"github.com/agentcage/router/policy"
	"github.com/agentcage/router/policy/policytest"
	"github.com/agentcage/router/proc"
	"github.com/agentcage/router/rules"
)

// TestSharedCases: the engine treats the shared flows as the policy, the relay and explain
// decide them. What the engine does is read from what it writes: a pass goes out unchanged,
// a reflection comes in to the listener (or the DNS port), a refusal comes back as a RST, a
// drop writes nothing, a DNS query is answered. Cases that come from a VM-facing interface
// with an address outside vm_networks are left out: on Windows VM traffic is a hypervisor
// process's (an app), and no capture here has interfaces.
func TestSharedCases(t *testing.T) {
	cfg, err := conf.Parse("shared.toml", []byte(policytest.Config), conf.Options{SkipSecrets: true})
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
			lk := &fakeLookup{owners: map[netip.AddrPort]proc.Info{}}
			if c.Flow.App != "" {
				lk.owners[src] = proc.Info{PID: 7, Name: c.Flow.App}
			}
			names := fakeNames{names: map[netip.Addr]string{policytest.PoolAddr: policytest.PoolName}}
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
