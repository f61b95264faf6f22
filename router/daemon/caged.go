package daemon

import (
	"slices"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
)

// CagedComms returns the names of the caged processes of cfg as the Linux kernel can tell
// them at a socket's creation (comm): the apps of the proxy and block rules and of the
// hypervisor presets, written as image names (a path pattern is matched in user space only,
// by the router's owner lookup). Each name also stands in lower case when written
// otherwise: the rules compare names without case, the kernel byte for byte.
func CagedComms(cfg *conf.Config) []string {
	var out []string
	add := func(as []rules.App) {
		for _, a := range as {
			if a.IsPath() {
				continue
			}
			for _, n := range []string{a.Text, a.Pattern()} {
				if !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
		}
	}
	add(cfg.Capture.CagedApps)
	for i := range cfg.Rules {
		if r := &cfg.Rules[i]; r.Action != rules.Direct {
			add(r.Apps)
		}
	}
	return out
}
