package policy_test

import (
	"net/netip"
	"testing"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

const profileConfig = `
[proxy.exit]
address = "192.0.2.1:1080"
[capture]
vm_networks = ["10.0.2.0/24"]

[[rule]]
name = "hypervisor"
apps = ["qemu-system-x86_64"]
action = "proxy"

[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"

[profile.offline]
[[profile.offline.rule]]
name = "model"
hosts = ["api.example.com"]
action = "proxy"

[profile.build]
[[profile.build.rule]]
name = "registries"
hosts = ["proxy.golang.org"]
action = "proxy"
`

// A profile's rules replace the top-level ones; the caged set stays the default's.
func TestProfiles(t *testing.T) {
	p := compile(t, profileConfig)
	vm := netip.MustParseAddr("10.0.2.15")
	dst := netip.MustParseAddr("198.51.100.7")
	for _, c := range []struct {
		profile, host, app string
		step               policy.Step
		action             rules.Action
		rule               string
	}{
		{"default", "proxy.golang.org", "", policy.StepRule, rules.Proxy, "vm"},
		{"default", "api.example.com", "", policy.StepRule, rules.Proxy, "vm"},
		{"", "proxy.golang.org", "", policy.StepRule, rules.Proxy, "vm"},
		{"offline", "api.example.com", "", policy.StepRule, rules.Proxy, "model"},
		{"offline", "proxy.golang.org", "", policy.StepCaged, rules.Block, policy.StepCaged.String()},
		{"build", "proxy.golang.org", "", policy.StepRule, rules.Proxy, "registries"},
		{"build", "api.example.com", "", policy.StepCaged, rules.Block, policy.StepCaged.String()},
		// The hypervisor is caged by the default rules, whatever the profile names.
		{"offline", "proxy.golang.org", "qemu-system-x86_64", policy.StepCaged, rules.Block, policy.StepCaged.String()},
		{"offline", "api.example.com", "qemu-system-x86_64", policy.StepRule, rules.Proxy, "model"},
	} {
		t.Run(c.profile+"/"+c.host+"/"+c.app, func(t *testing.T) {
			pp, ok := p.Profile(c.profile)
			if !ok {
				t.Fatalf("profile %q not found", c.profile)
			}
			f := policy.Flow{Network: rules.TCP, Src: vm, Dst: dst, Port: 443, Host: c.host}
			if c.app != "" {
				f.Src, f.App, f.AppPath = netip.MustParseAddr("192.168.1.10"), c.app, "/usr/bin/"+c.app
				if !pp.NeedsOwner(&f) {
					t.Error("NeedsOwner = false for a host flow")
				}
			}
			d := pp.Decide(&f)
			if d.Step != c.step || d.Action != c.action || d.Name != c.rule {
				t.Errorf("got %v %v by %q, want %v %v by %q", d.Step, d.Action, d.Name, c.step, c.action, c.rule)
			}
		})
	}
	if _, ok := p.Profile("nope"); ok {
		t.Error("an unknown profile was found")
	}
	if got, want := p.ProfileNames(), []string{"default", "build", "offline"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("ProfileNames = %v, want %v", got, want)
	}
	if off, _ := p.Profile("offline"); off.ProfileName() != "offline" || p.ProfileName() != "default" {
		t.Errorf("ProfileName = %q, %q", off.ProfileName(), p.ProfileName())
	}
}
