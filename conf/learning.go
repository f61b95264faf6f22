package conf

import (
	"errors"

	"github.com/agentcage/router/rules"
)

// LearningRule names the rule Learning adds.
const LearningRule = "(learning)"

// LearningFlows is the flow log of a learning session whose config names none: in the
// state directory (beside the config file when there is none).
const LearningFlows = "flows.jsonl"

// Learning turns c, read from path, into the config of a learning session (`router run
// --learn`): a caged flow that no rule of c decides is proxied, by a rule LearningRule added
// after c's own, instead of refused; and the flow log is on (LearningFlows in the
// state directory unless [log] flows names a file), for `router learn` to read what the session
// reached. The rule proxies through the upstream of c's first caged proxy rule, else c's
// first [proxy]. c's own rules, the host walls and the refusals that no rule overrides (DNS
// over HTTPS, the other guests) still decide first. It fails, changing nothing, when c has
// no proxy.
func Learning(c *Config, path string) error {
	via := ""
	for _, r := range c.Rules {
		if r.Caged && r.Action == rules.Proxy && !r.Disabled && r.Proxy != "" {
			via = r.Proxy
			break
		}
	}
	if via == "" && len(c.Proxies) > 0 {
		via = c.Proxies[0].Name
	}
	if via == "" {
		return errors.New("learn: the config has no [proxy] for the session's caged flows")
	}
	if len(c.RuleLines) == len(c.Rules) {
		c.RuleLines = append(c.RuleLines, 0) // written in no file
	}
	c.Rules = append(c.Rules, rules.Rule{Name: LearningRule, Caged: true, Action: rules.Proxy, Proxy: via})
	if c.Log.Flows == "" {
		c.Log.Flows = stateFile(c.Policy.StateDir, path, LearningFlows)
	}
	return nil
}
