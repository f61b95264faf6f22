package policytest

import (
	_ "embed"
	"strings"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// AskConfig asks about what no rule decides for the VM network ([policy] unknown =
// "ask"), and an ask rule asks about one name whatever the rest say; a rule lets one
// name through, a block rule refuses one address.
//
//go:embed testdata/ask.toml
var AskConfig string

// AskUnattendedConfig is AskConfig with [policy] unattended = true.
func AskUnattendedConfig() string {
	return strings.Replace(AskConfig, `unknown = "ask"`, "unknown = \"ask\"\nunattended = true", 1)
}

// AskCases are decided under AskConfig (unattended false) or AskUnattendedConfig (true):
// what would be asked is refused at once without anyone to answer; the walls and the
// rules that decide come first either way.
func AskCases(unattended bool) []Case {
	tcp := rules.TCP
	named := func(f policy.Flow, name string) policy.Flow { f.Host = name; return f }
	ask := func(c Case) Case {
		if unattended {
			c.Step, c.Action, c.Proxy, c.Rule = policy.StepUnattended, rules.Block, "", policy.StepUnattended.String()
		}
		return c
	}
	return []Case{
		ask(Case{"vm, no rule decides", flow(tcp, "", "10.0.2.15", "198.51.100.10:443"), policy.StepAsk, rules.Ask, "exit", policy.StepAsk.String()}),
		ask(Case{"vm, named no rule decides", named(flow(tcp, "", "10.0.2.15", PoolAddr.String()+":443"), "new.example"), policy.StepAsk, rules.Ask, "exit", policy.StepAsk.String()}),
		ask(Case{"vm, an ask rule", named(flow(tcp, "", "10.0.2.15", PoolAddr.String()+":443"), "asked.example"), policy.StepRule, rules.Ask, "exit", "asked"}),
		{"vm, allowed", named(flow(tcp, "", "10.0.2.15", PoolAddr.String()+":443"), "allowed.example"), policy.StepRule, rules.Proxy, "exit", "allowed"},
		{"vm, blocked", flow(tcp, "", "10.0.2.15", "203.0.113.66:80"), policy.StepRule, rules.Block, "", "blocked"},
		{"vm, DoH is never asked", flow(tcp, "", "10.0.2.15", "8.8.8.8:443"), policy.StepDoH, rules.Block, "", policy.StepDoH.String()},
		{"vm, the host is never asked", flow(tcp, "", "10.0.2.15", "192.168.1.10:22"), policy.StepHost, rules.Block, "", policy.StepHost.String()},
		{"vm, another guest is never asked", flow(tcp, "", "10.0.2.15", "10.0.2.9:22"), policy.StepToGuest, rules.Block, "", policy.StepToGuest.String()},
	}
}
