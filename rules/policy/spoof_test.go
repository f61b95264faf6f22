package policy_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestSpoofCases: a name the guest wrote picks a rule, never where a direct dial goes. The
// policy asks for the name's addresses before it decides a direct verdict the name won,
// the walls check every one of them, and the dial goes to them (the flow's own address
// first when it is one of them).
func TestSpoofCases(t *testing.T) {
	p := compile(t, policytest.SpoofConfig)
	for _, c := range policytest.SpoofCases() {
		t.Run(c.Name, func(t *testing.T) {
			f := c.Flow
			bare := f
			bare.Resolved = nil
			if want := c.Flow.Resolved != nil; p.NeedsResolve(&bare) != want {
				t.Errorf("NeedsResolve = %v, want %v", !want, want)
			}
			d := p.Decide(&f)
			if d.Step != c.Step || d.Action != c.Action || d.Proxy != c.Proxy || d.Name != c.Rule {
				t.Errorf("got %v %v %q by %q, want %v %v %q by %q", d.Step, d.Action, d.Proxy, d.Name, c.Step, c.Action, c.Proxy, c.Rule)
			}
			if d.ByName != c.ByName || d.Untrusted != c.Untrusted {
				t.Errorf("ByName %v Untrusted %v, want %v %v", d.ByName, d.Untrusted, c.ByName, c.Untrusted)
			}
			if e, _ := p.Explain(&f); e != d {
				t.Errorf("Explain decided %+v, Decide %+v", e, d)
			}
			if c.Action == rules.Direct {
				got := p.DialAddrs(&f, d)
				if len(got) == 0 || got[0] != c.Dial {
					t.Errorf("dials %v, want %v first", got, c.Dial)
				}
				if d.ByName && !slices.Equal(slices.SortedFunc(slices.Values(got), netip.Addr.Compare), slices.SortedFunc(slices.Values(f.Resolved), netip.Addr.Compare)) {
					t.Errorf("dials %v, want the resolved %v", got, f.Resolved)
				}
				if why := p.DialWhy(&f, d); d.Untrusted && !strings.Contains(why, "not trusted") {
					t.Errorf("DialWhy does not say the name is not trusted: %q", why)
				}
			}
			if d.Step != policy.StepRule && p.Why(&f, d) == "" {
				t.Error("no reason")
			}
		})
	}
}
