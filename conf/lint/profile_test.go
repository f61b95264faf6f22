package lint

import (
	"strconv"
	"strings"
	"testing"
)

// TestProfiles: a profile's rules are linted as a list of their own, findings named by the
// profile and at its lines; a profile without a catch-all is no finding.
func TestProfiles(t *testing.T) {
	cfg := parse(t, `
[proxy.exit]
address = "192.0.2.1:1080"

[[rule]]
name = "all"
action = "proxy"

[profile.build]
[[profile.build.rule]]
name = "web"
ports = [443]
action = "proxy"

[[profile.build.rule]]
name = "npm"
hosts = ["registry.npmjs.org"]
ports = [443]
action = "proxy"

[[profile.build.rule]]
name = "local"
hosts = ["127.0.0.1"]
action = "proxy"
`)
	var got []string
	for _, f := range Check(cfg, Host{OS: "linux"}) {
		if strings.HasPrefix(f.Message, "profile build: ") {
			got = append(got, f.Check+"@"+f.Rule+":"+strconv.Itoa(f.Line))
		}
	}
	if want := "unreachable@npm:15 local-via-proxy@local:21"; strings.Join(got, " ") != want {
		t.Errorf("profile findings %q, want %q", strings.Join(got, " "), want)
	}
}
