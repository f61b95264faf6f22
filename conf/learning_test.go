package conf

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcage/router/rules"
)

// TestLearning: a learning session proxies what no rule decides through the first caged
// proxy rule's upstream (else the first proxy), after the config's own rules, and turns the
// flow log on beside the config unless one is named; a config without a proxy is refused
// unchanged.
func TestLearning(t *testing.T) {
	for _, c := range []struct {
		name, text, via, flows string
	}{
		{"a caged rule's proxy", "[proxy.a]\naddress = \"192.0.2.1:1080\"\n[proxy.b]\naddress = \"192.0.2.2:1080\"\n[capture]\nvm_networks = [\"10.0.2.0/24\"]\n[[rule]]\nname = \"npm\"\ncaged = true\nhosts = [\"registry.npmjs.org\"]\naction = \"proxy\"\nproxy = \"b\"\n", "b", "/etc/router/" + LearningFlows},
		{"the first proxy", "[proxy.a]\naddress = \"192.0.2.1:1080\"\n[log]\nflows = \"logs/f.jsonl\"\n", "a", "/etc/router/logs/f.jsonl"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse("/etc/router/router.toml", []byte(c.text), Options{SkipSecrets: true, OS: "linux"})
			if err != nil {
				t.Fatal(err)
			}
			n := len(cfg.Rules)
			if err := Learning(cfg, "/etc/router/router.toml"); err != nil {
				t.Fatal(err)
			}
			last := cfg.Rules[len(cfg.Rules)-1]
			if len(cfg.Rules) != n+1 || last.Name != LearningRule || !last.Caged || last.Action != rules.Proxy || last.Proxy != c.via ||
				last.Hosts != nil || last.Ports != nil || last.Sources != nil || last.Apps != nil {
				t.Errorf("rules %+v; want the config's %d and the learning rule through %s", cfg.Rules, n, c.via)
			}
			if len(cfg.RuleLines) != len(cfg.Rules) {
				t.Errorf("%d rule lines for %d rules", len(cfg.RuleLines), len(cfg.Rules))
			}
			if cfg.Log.Flows != filepath.FromSlash(c.flows) {
				t.Errorf("flows %q; want %q", cfg.Log.Flows, c.flows)
			}
		})
	}
	cfg, err := Parse("router.toml", []byte("[[rule]]\nname = \"d\"\naction = \"direct\"\n"), Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Learning(cfg, "router.toml"); err == nil || !strings.Contains(err.Error(), "no [proxy]") || len(cfg.Rules) != 1 || cfg.Log.Flows != "" {
		t.Errorf("no proxy: %v, rules %d, flows %q", err, len(cfg.Rules), cfg.Log.Flows)
	}
}
