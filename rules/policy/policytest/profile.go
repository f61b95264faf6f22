package policytest

import (
	_ "embed"
	"net/netip"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// ProfileConfig has two profiles beside the top-level rules (which proxy every flow of
// the VM network): offline lets only the model's name through, build only a registry's.
// The hypervisor is caged by the top-level rules.
//
//go:embed testdata/profiles.toml
var ProfileConfig string

// ProfileCase is a Case under a profile of ProfileConfig.
type ProfileCase struct {
	Profile string
	Case
}

// ProfileCases are the cases of ProfileConfig, each under a profile: a profile's rules
// replace the top-level ones, and the caged set stays the default's.
func ProfileCases() []ProfileCase {
	vm := netip.MustParseAddr("10.0.2.15")
	dst := netip.MustParseAddr("198.51.100.7")
	host := netip.MustParseAddr("192.168.1.10")
	flow := func(name string) policy.Flow {
		return policy.Flow{Network: rules.TCP, Src: vm, Dst: dst, Port: 443, Host: name}
	}
	hyp := func(name string) policy.Flow {
		f := flow(name)
		f.Src, f.App, f.AppPath = host, "qemu-system-x86_64", "/usr/bin/qemu-system-x86_64"
		return f
	}
	caged := policy.StepCaged.String()
	return []ProfileCase{
		{"default", Case{"default registry", flow("proxy.golang.org"), policy.StepRule, rules.Proxy, "exit", "vm"}},
		{"default", Case{"default model", flow("api.example.com"), policy.StepRule, rules.Proxy, "exit", "vm"}},
		{"offline", Case{"offline model", flow("api.example.com"), policy.StepRule, rules.Proxy, "exit", "model"}},
		{"offline", Case{"offline registry", flow("proxy.golang.org"), policy.StepCaged, rules.Block, "", caged}},
		{"build", Case{"build registry", flow("proxy.golang.org"), policy.StepRule, rules.Proxy, "exit", "registries"}},
		{"build", Case{"build model", flow("api.example.com"), policy.StepCaged, rules.Block, "", caged}},
		{"offline", Case{"offline hypervisor registry", hyp("proxy.golang.org"), policy.StepCaged, rules.Block, "", caged}},
		{"offline", Case{"offline hypervisor model", hyp("api.example.com"), policy.StepRule, rules.Proxy, "exit", "model"}},
	}
}
