package policy_test

import (
	"testing"

	"github.com/agentcage/router/rules/policy/policytest"
)

// TestDecideAllocatesNothing: the data path's decision (the rules, the caged-app check, the
// walls, the DoH check) allocates nothing for any of the shared cases, whose apps are
// named in mixed case as Windows names them.
func TestDecideAllocatesNothing(t *testing.T) {
	if raceOn {
		t.Skip("the race detector's sync.Pool drops the scratch at random")
	}
	p := compile(t, policytest.Config)
	for _, c := range policytest.Cases() {
		f := c.Flow
		if n := testing.AllocsPerRun(20, func() { p.Decide(&f) }); n != 0 {
			t.Errorf("%s: Decide allocates %v times", c.Name, n)
		}
	}
}
