package platform

import (
	"slices"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/windivert/adapters"
	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/guard"
)

// This file translates a config into the WFP guard's plan (and the UDP scope the engine
// captures), apart from the engine's lifecycle in engine_platform.go.

// KnownHypervisorApps are the images of every hypervisor preset on goos that NATs in user
// space: on Windows they are caged always (their traffic is the guests'); elsewhere presets
// are named in the config.
func KnownHypervisorApps(goos string) []rules.App {
	if goos != "windows" {
		return nil
	}
	return capture.UserNATApps(goos)
}

// GuardPlan is the WFP guard a config asks for on this machine: the caged apps (the apps of
// proxy and block rules, the presets' and the known hypervisors' images) resolved to
// executables, the router's ports and forwards, the DNS scope, the cage subnets and the
// VM-facing adapters of vms that the host is walled from (adapters.Adapter.Walled). Names
// no executable answers to are returned: the capture still cages them by name, the guard
// cannot.
func GuardPlan(cfg *conf.Config, m guard.Machine, vms []adapters.Adapter, router, service string) (guard.Plan, []string, error) {
	var names []string
	caged, services := policy.CagedApps(cfg)
	for _, c := range caged {
		names = append(names, c.App.String())
	}
	for _, a := range KnownHypervisorApps("windows") {
		names = append(names, a.String())
	}
	apps := guard.ResolveApps(m, slices.Compact(names))
	var cagedUDP []wfp.PortRange
	if ports, narrow := udpScope(cfg, apps.Unresolved); narrow {
		cagedUDP = []wfp.PortRange{}
		for _, r := range ports {
			cagedUDP = append(cagedUDP, wfp.PortRange{From: r.Lo, To: r.Hi})
		}
	}
	env := guard.Env{
		CagedUDP:      cagedUDP,
		CagedApps:     apps.Paths,
		SystemRoot:    m.Getenv("SystemRoot"),
		CagedServices: slices.Compact(slices.Sorted(slices.Values(services))),
		Router:        router,
		Service:       service,
		Listeners:     []uint16{cfg.Capture.ListenerPort},
		// The router answers every process's DNS only with [dns] capture = "all": then
		// no other process may reach a resolver itself.
		DNSAll: cfg.DNS.Capture == conf.DNSCaptureAll,
		// A Hyper-V internal switch's guests have no way out but the router's inbound and
		// forwards: the guard forbids forwarding anything from them, in every state.
		CageSubnets: cfg.Capture.CageSubnets,
	}
	for _, a := range vms {
		if a.Walled(cfg.Capture.CageSubnets) {
			env.VMAdapters = append(env.VMAdapters, guard.VMAdapter{Name: a.Name, LUID: a.LUID, Subnets: a.Subnets})
		}
	}
	if cfg.Capture.DNSPort != 0 {
		env.DNSPorts = []uint16{cfg.Capture.DNSPort}
	}
	for _, f := range cfg.Forwards {
		env.Forwards = append(env.Forwards, guard.Forward{Listen: f.Listen, Connect: f.Connect, Allow: f.Allow})
	}
	for _, in := range cfg.Inbounds {
		env.Inbounds = append(env.Inbounds, guard.Inbound{Listen: in.Listen, Allow: in.Allow})
	}
	plan, err := guard.NewPlan(env)
	return plan, apps.Unresolved, err
}

// udpScope is the UDP the capture must take for cfg besides DNS: narrow with the ports of
// policy.CagedUDPPorts when only the caged apps' UDP matters (local = false) and the guard
// can refuse the rest of theirs (every caged name, the config's and the known hypervisors'
// images, is an executable it names; no caged service); otherwise every UDP packet (narrow
// false).
//
// A known hypervisor's image the guard found no file for counts too: a portable copy, or
// one from Scoop or MSYS2, runs from a path the guard does not know, and its UDP to another
// port would be neither diverted nor blocked.
func udpScope(cfg *conf.Config, unresolved []string) (ports []rules.PortRange, narrow bool) {
	if cfg.Capture.Local {
		return nil, false
	}
	_, services := policy.CagedApps(cfg)
	if len(services) > 0 || len(unresolved) > 0 {
		return nil, false
	}
	ports, all := policy.New(cfg, policy.Env{}).CagedUDPPorts()
	return ports, !all
}
