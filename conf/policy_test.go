package conf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/winetest"
	"github.com/agentcage/router/rules"
)

const askConfig = `
[proxy.exit]
address = "192.0.2.1:1080"

[capture]
vm_networks = ["10.0.2.0/24"]

[policy]
unknown = "ask"
ask_timeout = "45s"

[[rule]]
name = "first"
hosts = ["a.example"]
action = "proxy"

[[rule]]
name = "asked"
hosts = ["*.example"]
action = "ask"
`

// TestApproved: "always" answers land in the router's own file beside the config, sorted
// and commented, the user's file untouched; a load reads them before the first ask rule.
func TestApproved(t *testing.T) {
	dir := winetest.TempDir(t)
	cfgPath := filepath.Join(dir, "router.toml")
	if err := os.WriteFile(cfgPath, []byte(askConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(cfgPath, Options{SkipSecrets: true, OS: "linux"}) // (vm_networks: Linux's)
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy.Unknown != rules.Ask || c.Policy.AskTimeout != 45*time.Second || c.Policy.AskProxy != "exit" || c.ApprovedN != 0 {
		t.Fatalf("policy = %+v, approved %d", c.Policy, c.ApprovedN)
	}
	path := c.Policy.ApprovedPath(cfgPath)
	if path != filepath.Join(dir, DefaultApproved) {
		t.Errorf("approved path = %s", path)
	}
	at := time.Date(2026, 12, 1, 23, 40, 0, 0, time.UTC)
	for _, h := range []string{"zeta.example", "beta.example", "203.0.113.7", "beta.example"} {
		if err := WriteApproval(path, Approval{Host: h, Port: 443, Proxy: "exit", At: at, By: "console 127.0.0.1\nforged"}); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(path)
	text := string(b)
	if strings.Count(text, "[[rule]]") != 3 || !strings.Contains(text, "# approved 2026-12-01T23:40:00Z by console 127.0.0.1 forged\n") {
		t.Errorf("approved file:\n%s", text)
	}
	if i, j, k := strings.Index(text, `"approved 203.0.113.7:443"`), strings.Index(text, `"approved beta.example:443"`), strings.Index(text, `"approved zeta.example:443"`); !(i < j && j < k) {
		t.Errorf("not sorted:\n%s", text)
	}
	if u, _ := os.ReadFile(cfgPath); string(u) != askConfig {
		t.Error("the user's config was changed")
	}
	c, err = Load(cfgPath, Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range c.Rules {
		names = append(names, r.Name)
	}
	want := "first,approved 203.0.113.7:443,approved beta.example:443,approved zeta.example:443,asked"
	if got := strings.Join(names, ","); got != want || c.ApprovedAt != 1 || c.ApprovedN != 3 {
		t.Errorf("rules = %s (approved at %d, %d), want %s", got, c.ApprovedAt, c.ApprovedN, want)
	}
	if r := c.Rules[2]; r.Action != rules.Proxy || r.Proxy != "exit" || !r.Caged || len(r.Ports) != 1 {
		t.Errorf("approved rule = %+v", r)
	}
	// A broken approved file is named in the error, with its line.
	os.WriteFile(path, []byte("[[rule]]\nname = \"x\"\naction = \"ask\"\nbogus = 1\n"), 0o600)
	_, err = Load(cfgPath, Options{SkipSecrets: true, OS: "linux"})
	if err == nil || !strings.Contains(err.Error(), DefaultApproved+":") || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("broken approved file: %v", err)
	}
}

func TestPolicyKeys(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"[policy]\nunknown = \"maybe\"\n", "not block or ask"},
		{"[policy]\nunknown = \"ask\"\n", "no [proxy.NAME] is defined"},
		{"[policy]\nask_timeout = \"1h\"\n", "between 1s and"},
		{"[policy]\nask_timeout = \"500ms\"\n", "500ms: between 1s and 10m0s (a held flow keeps its client waiting)"},
		{"[policy]\nunattend = true\n", "unknown key"},
		{"[console]\nlisten = \"0.0.0.0:9478\"\n", "not a loopback address"},
		{"[[rule]]\naction = \"ask\"\n", "no [proxy.NAME] is defined"},
	} {
		_, err := Parse("p.toml", []byte(c.text), Options{SkipSecrets: true})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.text, err, c.want)
		}
	}
	c, err := Parse("p.toml", []byte("[console]\nlisten = \"127.0.0.1:9478\"\n"), Options{SkipSecrets: true})
	if err != nil || c.Console.Listen.String() != DefaultConsoleListen {
		t.Errorf("console: %v %+v", err, c)
	}
}

// TestApprovedBeforeCatchAll: with only unknown = "ask", the approved rules go before the
// host's bare direct catch-all, which still ends the list.
func TestApprovedBeforeCatchAll(t *testing.T) {
	cfg := "[proxy.exit]\naddress = \"192.0.2.1:1080\"\n\n[policy]\nunknown = \"ask\"\n\n[[rule]]\nname = \"first\"\nhosts = [\"a.example\"]\naction = \"proxy\"\n\n[[rule]]\nname = \"default\"\naction = \"direct\"\n"
	approved := "[[rule]]\nname = \"approved b.example:443\"\ncaged = true\nhosts = [\"b.example\"]\nports = [443]\naction = \"proxy\"\n"
	c, err := Parse("/etc/router/router.toml", []byte(cfg), Options{SkipSecrets: true, ReadFile: func(name string) ([]byte, error) {
		if name != filepath.FromSlash("/etc/router/approved.toml") {
			t.Errorf("read %s", name)
		}
		return []byte(approved), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range c.Rules {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ","); got != "first,approved b.example:443,default" || c.ApprovedAt != 1 || c.RuleFile(1) != filepath.FromSlash("/etc/router/approved.toml") || c.RuleFile(2) != "/etc/router/router.toml" {
		t.Errorf("rules %s, approved at %d", got, c.ApprovedAt)
	}
}
