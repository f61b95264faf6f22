package redirect

import (
	"net/netip"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
	"github.com/agentcage/router/windivert/packet"
)

// TestSpoofCases: the engine decides at the SYN, before the client wrote a name, so it never
// passes a flow that a name from its first bytes could still send direct: it reflects it to
// the router, which reads the name and dials it as its resolver resolves it (the relay's
// TestSpoofCasesTransparent), and refuses only what no name could open.
func TestSpoofCases(t *testing.T) {
	cfg, err := conf.Parse("spoof.toml", []byte(policytest.SpoofConfig), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	dec := policy.New(cfg, policytest.Env())
	for i, c := range policytest.SpoofCases() {
		if c.Paths&policytest.Engine == 0 {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			src := netip.AddrPortFrom(c.Flow.Src, uint16(40000+i))
			dst := netip.AddrPortFrom(c.Flow.Dst, c.Flow.Port)
			lk := &fakeLookup{owners: map[netip.AddrPort]rules.Owner{}}
			names := &dnstest.Names{Names: map[netip.Addr]string{}}
			e, dev, _ := newTest(t, true, dec, Options{Lookup: lk.lookup, Names: names, DNS: &fakeDNS{}, DNSPort: 47153})
			send(e, tcpPkt(src, dst, syn, 1, 0, ""), outMeta)
			ps := decode(t, dev.take())
			var got string
			switch {
			case len(ps) == 0:
				got = "drop"
			case ps[0].m.Outbound:
				got = "pass"
			case ps[0].flags&packet.TCPRst != 0:
				got = "refuse"
			default:
				got = "reflect"
			}
			want := "reflect"
			if c.Step == policy.StepHost && c.Action == rules.Block {
				want = "refuse"
			}
			if got != want {
				t.Errorf("engine did %s (%v), want %s", got, ps, want)
			}
		})
	}
}
