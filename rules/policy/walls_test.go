package policy_test

import (
	"net/netip"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestWallCases: the host walls decide the shared cases; a name is decided the same asked
// for by name (an inbound's client) and behind a fake IP (the transparent paths), and the
// policy asks for its addresses before it decides.
func TestWallCases(t *testing.T) {
	cfg, err := conf.Parse("walls.toml", []byte(policytest.WallConfig), conf.Options{SkipSecrets: true, OS: "linux"})
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

// TestAnswerWall: the addresses a DNS answer may not give a caged client: those the walls
// refuse on every port.
func TestAnswerWall(t *testing.T) {
	cfg, err := conf.Parse("walls.toml", []byte(policytest.WallConfig), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	p := policy.New(cfg, policytest.WallEnv())
	for _, tc := range []struct {
		addr    string
		step    policy.Step
		refused bool
	}{
		{"203.0.113.5", policy.StepRule, false},
		{"10.0.2.2", policy.StepRule, false},  // the forward and the inbounds listen there
		{"127.0.0.1", policy.StepRule, false}, // the forward's target, for the process that carries a guest
		{"::1", policy.StepHost, true},
		{"0.0.0.0", policy.StepHost, true},
		{"169.254.169.254", policy.StepHost, true},
		{"198.51.100.2", policy.StepHost, true},
		{"10.0.4.15", policy.StepToGuest, true},
		{"10.0.4.40", policy.StepRule, false}, // a rule names it
	} {
		s, refused := p.AnswerWall(netip.MustParseAddr(tc.addr))
		if s != tc.step || refused != tc.refused {
			t.Errorf("%s: %v %v, want %v %v", tc.addr, s, refused, tc.step, tc.refused)
		}
	}
}
