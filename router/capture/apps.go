package capture

import (
	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
)

// UserNATApps are the images of every hypervisor preset on goos that NATs in user space:
// the processes that carry guests' traffic.
func UserNATApps(goos string) []rules.App {
	var out []rules.App
	for _, name := range conf.PresetNames() {
		p, why := conf.LookupPreset(name, goos)
		if why != "" || p.NAT != conf.NATUser {
			continue
		}
		for _, a := range p.Apps {
			out = append(out, rules.MustApp(a))
		}
	}
	return out
}
