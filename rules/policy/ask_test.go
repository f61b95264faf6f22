package policy_test

import (
	"strings"
	"testing"

	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestAskCases: Decide and Explain agree on the ask cases, attended and not, and Why says
// what happens to a held flow.
func TestAskCases(t *testing.T) {
	for _, unattended := range []bool{false, true} {
		cfg := policytest.AskConfig
		if unattended {
			cfg = policytest.AskUnattendedConfig()
		}
		p := compile(t, cfg)
		for _, c := range policytest.AskCases(unattended) {
			t.Run(c.Name, func(t *testing.T) {
				d := p.Decide(&c.Flow)
				if d.Step != c.Step || d.Action != c.Action || d.Proxy != c.Proxy || d.Name != c.Rule {
					t.Errorf("unattended=%v: got %v %v %q by %q, want %v %v %q by %q", unattended, d.Step, d.Action, d.Proxy, d.Name, c.Step, c.Action, c.Proxy, c.Rule)
				}
				if e, _ := p.Explain(&c.Flow); e != d {
					t.Errorf("Explain decided %+v, Decide %+v", e, d)
				}
				why := p.Why(&c.Flow, d)
				switch d.Step {
				case policy.StepAsk:
					if !strings.Contains(why, "held") || !strings.Contains(why, "ask_timeout") {
						t.Errorf("Why = %q", why)
					}
				case policy.StepUnattended:
					if !strings.Contains(why, "unattended") {
						t.Errorf("Why = %q", why)
					}
				}
			})
		}
	}
}
