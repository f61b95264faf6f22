package daemon

import (
	"slices"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules/policy"
)

// CagedComms returns the names of the caged processes of cfg (policy.CagedApps: the apps of
// the proxy and block rules and of the hypervisor presets) as the Linux kernel can tell them
// at a socket's creation (comm): image names only (a path pattern is matched in user space
// only, by the router's owner lookup). Each name also stands in lower case when written
// otherwise: the rules compare names without case, the kernel byte for byte.
func CagedComms(cfg *conf.Config) []string {
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
