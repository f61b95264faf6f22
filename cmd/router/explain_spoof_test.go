package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestExplainSpoofCases: explain decides the spoof cases as the policy and the relay do
// (--sni for the first bytes' name, --resolved for what the router's resolver says), and
// says where a direct dial goes and that a name from the first bytes is not trusted.
func TestExplainSpoofCases(t *testing.T) {
	path := writeTemp(t, "spoof.toml", policytest.SpoofConfig)
	for _, c := range policytest.SpoofCases() {
		if c.Paths&policytest.Explain == 0 {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			f := c.Flow
			args := append([]string{"--config", path, "--sni", f.Sniffed}, flowArgs(f)...)
			if f.Resolved != nil {
				var as []string
				for _, a := range f.Resolved {
					as = append(as, a.String())
				}
				if len(as) == 0 {
					as = []string{"none"}
				}
				args = append(args, "--resolved", strings.Join(as, ","))
			}
			o := runExplainJSON(t, args, policytest.Env())
			checkVerdict(t, o, c.Case)
			if o.Verdict.NameUntrusted != c.Untrusted {
				t.Errorf("name_untrusted = %v, want %v", o.Verdict.NameUntrusted, c.Untrusted)
			}
			if c.Action == rules.Direct {
				wantDial := c.Dial.String()
				if got := o.Verdict.Dial; len(got) == 0 || got[0] != wantDial {
					t.Errorf("dial %v, want %s first", got, wantDial)
				}
			}
			// The text says it too.
			text := runExplainText(t, args, policytest.Env())
			if said := strings.Contains(text, "not trusted"); said != c.Untrusted {
				t.Errorf("text says \"not trusted\": %v, want %v:\n%s", said, c.Untrusted, text)
			}
		})
	}
	// Without --resolved explain cannot check the name's addresses: it says so, and that the
	// dial goes to the name, not to the address given.
	args := []string{"--config", path, "--src", "10.0.2.15", "--from-vm", "--dst", netip.AddrPortFrom(policytest.SpoofAddr, 22).String(), "--sni", "localhost"}
	text := runExplainText(t, args, policytest.Env())
	for _, want := range []string{"not trusted", "--resolved", "never " + policytest.SpoofAddr.String()} {
		if !strings.Contains(text, want) {
			t.Errorf("explain does not say %q:\n%s", want, text)
		}
	}
}
