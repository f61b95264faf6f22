package policy_test

import (
	"slices"
	"testing"

	"github.com/agentcage/router/rules/policy/policytest"
)

// A profile's rules replace the top-level ones; the caged set stays the default's.
func TestProfiles(t *testing.T) {
	p := compile(t, policytest.ProfileConfig)
	for _, c := range policytest.ProfileCases() {
		t.Run(c.Name, func(t *testing.T) {
			pp, ok := p.Profile(c.Profile)
			if !ok {
				t.Fatalf("profile %q not found", c.Profile)
			}
			if c.Flow.App != "" && !pp.NeedsOwner(&c.Flow) {
				t.Error("NeedsOwner = false for a host flow")
			}
			d := pp.Decide(&c.Flow)
			if d.Step != c.Step || d.Action != c.Action || d.Proxy != c.Proxy || d.Name != c.Rule {
				t.Errorf("got %v %v %q by %q, want %v %v %q by %q", d.Step, d.Action, d.Proxy, d.Name, c.Step, c.Action, c.Proxy, c.Rule)
			}
		})
	}
	if _, ok := p.Profile("nope"); ok {
		t.Error("an unknown profile was found")
	}
	if d, ok := p.Profile(""); !ok || d != p {
		t.Error(`Profile("") is not the default`)
	}
	if got, want := p.ProfileNames(), []string{"default", "build", "offline"}; !slices.Equal(got, want) {
		t.Errorf("ProfileNames = %v, want %v", got, want)
	}
	if off, _ := p.Profile("offline"); off.ProfileName() != "offline" || p.ProfileName() != "default" {
		t.Errorf("ProfileName = %q, %q", off.ProfileName(), p.ProfileName())
	}
}
