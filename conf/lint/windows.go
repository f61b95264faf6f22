package lint

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/windivert/adapters"
)

// WindowsFacts is what lint can know of a Windows machine's VMs beyond the config: the
// VM-facing adapters (package adapters) and the VirtualBox VMs whose NAT resolves names
// through the host's resolver. Only `router lint` on Windows gathers them.
type WindowsFacts struct {
	Adapters []adapters.Adapter
	// HostResolverVMs are the VirtualBox VMs with the NAT "host resolver" on
	// (VBoxManage modifyvm VM --natdnshostresolver1 on): their guests' queries are made by
	// the host's DNS Client service (the Dnscache svchost), not by VirtualBox's process.
	HostResolverVMs []string
	// Bridged are the VMs with an adapter bridged to a host adapter: no capture sees
	// their guests (package adapters, BridgedVMs).
	Bridged []adapters.Bridged
	// WSL is what can be told of WSL2's networking (the Hyper-V firewall's default
	// outbound for WSL closes its adapter).
	WSL adapters.WSL
}

// windows checks the config against what is known of this Windows machine.
func (l *linter) windows() {
	if l.goos() != "windows" {
		return
	}
	l.svchostApps()
	w := l.host.Windows
	for _, a := range adapters.Uncaged(w.Adapters, l.cfg.Capture.CageSubnets, w.WSL) {
		how, fix := "Windows NATs its guests in the kernel", "run the agent's VM on an Internal switch without NAT and put its subnet in [capture] cage_subnets (docs/hyperv.md); for WSL2 set the Hyper-V firewall's default outbound to Block"
		switch {
		case a.Kind == adapters.KindVirtualBox || a.Kind == adapters.KindVMware:
			how, fix = "IP forwarding (or Internet Connection Sharing) is on for it, so its guests can route out past the hypervisor's caged processes", "turn forwarding and ICS off for it (Set-NetIPInterface -InterfaceAlias NAME -Forwarding Disabled)"
		case a.Kind == adapters.KindWSL && len(a.Subnets) == 0:
			how = "mirrored networking puts WSL on the host's own adapters, below any process of the host"
		case a.NAT != adapters.NATWinNAT && a.NAT != adapters.NATHNS:
			how = "IP forwarding is on for it"
		}
		sev, then := Error, "the router refuses to start while it is there unless [capture] uncaged_adapters = \"accept\""
		if l.cfg.Capture.UncagedAdapters == "accept" {
			sev, then = Warning, "accepted ([capture] uncaged_adapters = \"accept\")"
		}
		l.add(Finding{Severity: sev, Check: CheckUncagedSwitch, Line: l.line("capture"),
			Message: fmt.Sprintf("adapter %q (%s, %s): %s, where no capture sees them: a VM or WSL distribution on it is not caged; %s", a.Name, a.Kind, subnetList(a.Subnets), how, then),
			Fix:     fix})
	}
	for _, a := range w.Adapters {
		if a.External() && !a.Covered(l.cfg.Capture.CageSubnets) {
			l.add(Finding{Severity: Warning, Check: CheckBridged, Line: l.line("capture"),
				Message: fmt.Sprintf("adapter %q (%s): a Hyper-V External switch (it has the LAN's gateway): a VM on it is a machine of the host's LAN, whose frames pass below the host's network stack, where neither WinDivert nor WFP sees them, so it is not caged and the guard does not hold it", a.Name, subnetList(a.Subnets)),
				Fix:     "run the agent's VM on an Internal switch without NAT and put its subnet in [capture] cage_subnets (docs/hyperv.md)"})
		}
	}
	for _, b := range w.Bridged {
		l.add(Finding{Severity: Warning, Check: CheckBridged, Line: l.line("capture"),
			Message: fmt.Sprintf("%s: its guest is a machine of the host's LAN; its frames pass below the host's network stack, where neither WinDivert nor WFP sees them, so it is not caged and the guard does not hold it", b),
			Fix:     "give the agent's VM a NAT adapter (VirtualBox NAT, VMware VMnet8) or a Hyper-V Internal switch in cage_subnets, and a host-only adapter for the model"})
	}
	if len(w.HostResolverVMs) == 0 || l.cfg.DNS.Capture != conf.DNSCaptureCaged || l.dnscacheCaged() {
		return
	}
	l.add(Finding{Severity: Warning, Check: CheckHostResolver, Line: l.line("dns"),
		Message: fmt.Sprintf("VirtualBox VM %s resolves through the host (NAT host resolver on): its queries come from the Dnscache svchost, which [dns] capture = \"caged\" passes untouched, so its names leak to the host's resolver", strings.Join(quoteAll(w.HostResolverVMs), ", ")),
		Fix:     "turn the host resolver off (VBoxManage modifyvm VM --natdnshostresolver1 off), or set [dns] capture = \"all\""})
}

// svchostApps flags the proxy and block rules whose apps name svchost.exe: it hosts most of
// Windows' services, so caging it by image cages them all (DHCP, DNS, Windows Update, time
// sync), and the guard never blocks a Windows image by path, so it would not hold them
// while the router is stopped either. A service is caged by its name (services).
func (l *linter) svchostApps() {
	for i := range l.cfg.Rules {
		r := &l.cfg.Rules[i]
		if r.Action == rules.Direct {
			continue
		}
		for _, a := range r.Apps {
			if !strings.Contains(a.Pattern(), "svchost") {
				continue
			}
			l.add(Finding{Severity: Error, Check: CheckSvchostApp, Line: l.ruleLine(i),
				Message: fmt.Sprintf("%s: apps names %q, the host of most Windows services: caging it by image takes the host's DHCP, DNS, Windows Update and time sync into the cage, and the guard does not hold it while the router is stopped", l.ruleRef(i), a.String()),
				Fix:     "name the services instead, e.g. services = [\"Dnscache\"] (tasklist /svc lists the services of each svchost.exe)"})
		}
	}
}

// dnscacheCaged reports whether a proxy or block rule names the DNS Client service, which
// cages every process's resolution.
func (l *linter) dnscacheCaged() bool {
	for _, r := range l.cfg.Rules {
		if r.Action == rules.Direct {
			continue
		}
		for _, s := range r.Services {
			if strings.EqualFold(s, "Dnscache") {
				return true
			}
		}
	}
	return false
}

func subnetList(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "no address"
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return strings.Join(out, ", ")
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
