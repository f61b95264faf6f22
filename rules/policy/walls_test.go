package policy_test

import (
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestWallCases: the host walls decide the shared cases; a name is decided the same asked
// for by name (an inbound's client) and behind a fake IP (the transparent paths), and the
// policy asks for its addresses before it decides.
func TestWallCases(t *testing.T) {
	cfg, err := conf.Parse("walls.toml", []byte(policytest.WallConfig), conf.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	p := policy.New(cfg, policytest.WallEnv())
	for _, c := range policytest.WallCases() {
		t.Run(c.Name, func(t *testing.T) {
			flows := []policy.Flow{c.Flow}
			if c.Flow.Host != "" {
				fake := c.Flow
				fake.Dst = policytest.PoolAddr
				flows = append(flows, fake)
				for _, f := range flows {
					f.Resolved = nil
					if !p.NeedsResolve(&f) {
						t.Errorf("%v: the policy does not ask what %q resolves to", f.Dst, f.Host)
					}
				}
			}
			for _, f := range flows {
				d := p.Decide(&f)
				if d.Step != c.Step || d.Action != c.Action || d.Proxy != c.Proxy || d.Name != c.Rule {
					t.Errorf("%v: got %v %v %q by %q, want %v %v %q by %q", f.Dst, d.Step, d.Action, d.Proxy, d.Name, c.Step, c.Action, c.Proxy, c.Rule)
				}
				if e, _ := p.Explain(&f); e != d {
					t.Errorf("Explain decided %+v, Decide %+v", e, d)
				}
				if p.Why(&f, d) == "" {
					t.Error("no reason")
				}
			}
		})
	}
}
