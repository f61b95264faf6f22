package policy_test

import (
	"net/netip"
	"testing"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestGateCases: the shared model gate cases, decided and gated by the policy.
func TestGateCases(t *testing.T) {
	p := policy.New(parse(t, policytest.GateConfig), policytest.WallEnv())
	for _, c := range policytest.GateCases() {
		t.Run(c.Name, func(t *testing.T) {
			f := c.Flow
			d := p.Decide(&f)
			if d.Action != c.Action || d.Name != c.Rule {
				t.Errorf("decided %v by %q, want %v by %q", d.Action, d.Name, c.Action, c.Rule)
			}
			g, ok := p.Gate(&f, d)
			if g.Forward != c.Gate || ok != (c.Gate != "") || g.Raw != c.Raw {
				t.Errorf("gate %+v %v, want %q raw %v", g, ok, c.Gate, c.Raw)
			}
			if (p.GateWhy(&f, d) != "") != ok {
				t.Errorf("GateWhy %q for gate %v", p.GateWhy(&f, d), ok)
			}
			// By name: an inbound's client asking for a name that resolves to the address.
			if f.Dst.Unmap().IsLoopback() || !ok || f.Host != "" {
				return
			}
			byName := f
			byName.Dst, byName.Host, byName.Resolved = netip.Addr{}, "gw.test", []netip.Addr{f.Dst}
			if g2, _ := p.Gate(&byName, d); g2 != g {
				t.Errorf("resolved: gate %+v, want %+v", g2, g)
			}
		})
	}
}

// TestGateNeedsDirectCaged: only a caged TCP flow let through direct meets a gate.
func TestGateNeedsDirectCaged(t *testing.T) {
	p := policy.New(parse(t, policytest.GateConfig), policytest.WallEnv())
	f := policytest.GateCases()[0].Flow
	d := p.Decide(&f)
	for _, tc := range []struct {
		name string
		edit func(*policy.Flow, *policy.Decision)
	}{
		{"not caged", func(_ *policy.Flow, d *policy.Decision) { d.Caged = false }},
		{"udp", func(f *policy.Flow, _ *policy.Decision) { f.Network = rules.UDP }},
	} {
		f2, d2 := f, d
		tc.edit(&f2, &d2)
		if g, ok := p.Gate(&f2, d2); ok {
			t.Errorf("%s: gate %+v", tc.name, g)
		}
	}
}
