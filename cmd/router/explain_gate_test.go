package main

import (
	"strings"
	"testing"

	"github.com/agentcage/router/rules/policy/policytest"
)

// TestExplainGateCases: explain says which model gate a flow meets, as the policy and the
// data paths decide it (policytest.GateCases), in its JSON and its text.
func TestExplainGateCases(t *testing.T) {
	path := writeTemp(t, "gate.toml", policytest.GateConfig)
	for _, c := range policytest.GateCases() {
		if c.Paths&policytest.Explain == 0 {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			args := append([]string{"--config", path}, flowArgs(c.Flow)...)
			o := runExplainJSON(t, args, policytest.WallEnv())
			if o.Verdict.Action != c.Action.String() || o.Verdict.Rule != c.Rule {
				t.Errorf("explain: %+v, want %s by %q", o.Verdict, c.Action, c.Rule)
			}
			switch {
			case c.Gate == "" && o.Gate != nil:
				t.Errorf("gate %+v, want none", o.Gate)
			case c.Gate != "" && (o.Gate == nil || o.Gate.Forward != c.Gate || o.Gate.Raw != c.Raw):
				t.Errorf("gate %+v, want forward %q raw %v", o.Gate, c.Gate, c.Raw)
			}
			text := runExplainText(t, args, policytest.WallEnv())
			if got := strings.Contains(text, "gate: forward "+c.Gate+" "); got != (c.Gate != "") {
				t.Errorf("text output %q; want a gate line %v", text, c.Gate != "")
			}
		})
	}
}
