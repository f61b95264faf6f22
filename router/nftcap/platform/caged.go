package platform

import (
	"slices"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules/policy"
)

// CagedNames returns the names of the caged processes of cfg (policy.CagedApps: the apps of
// the proxy and block rules and of the hypervisor presets) as the Linux kernel can tell them
// at a socket's creation: executables' file names (see cagemark: a process, or one of its
// ancestors, runs an executable of that name), not paths (a path pattern is matched in user
// space only, by the router's owner lookup). Each name also stands in lower case when
// written otherwise: the rules compare names without case, the kernel byte for byte.
func CagedNames(cfg *conf.Config) []string {
	apps, _ := policy.CagedApps(cfg)
	var out []string
	for _, a := range apps {
		if a.App.IsPath() {
			continue
		}
		for _, n := range []string{a.App.Text, a.App.Pattern()} {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}
