// Package policytest holds the flows that every path deciding flows must agree on: the
// policy itself, the Linux relay (package router), the Windows engine (package redirect)
// and `router explain`. Each path's tests run Cases through its own machinery and assert the
// same verdicts.
package policytest

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// Config is the config the cases are decided under: a VirtualBox-like setup with the model
// forwarded, a VM network and a hypervisor app sent through the proxy, a DNS-over-TLS rule
// that asks for direct, a block rule, a disabled block rule (enabled = false) that every path
// must skip, and a bare direct catch-all for this host. It has no
// host-name rule, so every verdict is final without the name (a capture that decides before
// it knows names, like the Windows engine, would otherwise defer to the router; see
// policy.Decision.Final).
const Config = `
[proxy.exit]
address = "192.0.2.1:1080"

[capture]
vm_networks = ["10.0.2.0/24"]
local = true

[[forward]]
listen = "192.168.56.1:47831"
connect = "127.0.0.1:47831"
allow = ["192.168.56.0/24"]

[dns]
mode = "fake-ip"

[[rule]]
name = "model-direct"
hosts = ["10.0.2.2", "127.0.0.1", "192.168.56.0/24"]
ports = ["47831"]
action = "direct"

[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"
proxy = "exit"

[[rule]]
name = "hypervisor"
apps = ["VirtualBoxVM.exe", "VBoxHeadless.exe", "qemu-system-*"]
action = "proxy"
proxy = "exit"

[[rule]]
name = "corp-dot"
hosts = ["9.9.9.9"]
ports = ["853"]
action = "direct"

[[rule]]
name = "blocked"
hosts = ["203.0.113.66"]
action = "block"

[[rule]]
name = "switched-off"
enabled = false
hosts = ["198.51.100.0/24"]
action = "block"

[[rule]]
name = "default"
action = "direct"
`

// Pool is the fake-IP pool of Config (the default); PoolName is the name the cases give
// PoolAddr, and PoolOrphan is a pool address no DNS answer gave out.
var (
	PoolAddr   = netip.MustParseAddr("198.18.0.5")
	PoolName   = "example.com"
	PoolOrphan = netip.MustParseAddr("198.18.0.9")
)

// HostAddrs are the host's own addresses the cases assume (Env.HostAddr).
var HostAddrs = []netip.Addr{netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("192.168.56.1")}

// Env is the policy environment of the cases: the host's addresses, and a capture that
// leaves this host's own uncaged flows alone without local (Scoped), as both captures do.
func Env() policy.Env {
	return policy.Env{Scoped: true, HostAddr: func(a netip.Addr) bool {
		for _, h := range HostAddrs {
			if h == a {
				return true
			}
		}
		return false
	}}
}

// Case is one flow and the decision every path must reach.
type Case struct {
	Name   string
	Flow   policy.Flow
	Step   policy.Step
	Action rules.Action
	Proxy  string // for Action Proxy
	Rule   string // the deciding rule's name, or the step's name
}

// Who owns a case's flow.
const (
	Chrome     = "chrome.exe"
	Hypervisor = "VBoxHeadless.exe"
)

func flow(network rules.Network, app, src, dst string) policy.Flow {
	ap := netip.MustParseAddrPort(dst)
	f := policy.Flow{Network: network, Src: netip.MustParseAddr(src), Dst: ap.Addr(), Port: ap.Port(), App: app}
	return f
}

// Cases returns the shared cases, each a new copy.
func Cases() []Case {
	tcp, udp := rules.TCP, rules.UDP
	vm := func(f policy.Flow) policy.Flow { f.FromVM = true; return f }
	named := func(f policy.Flow, name string) policy.Flow { f.Host = name; return f }
	return []Case{
		{"host app, public", flow(tcp, Chrome, "192.168.1.10", "198.51.100.10:443"), policy.StepRule, rules.Direct, "", "default"},
		{"hypervisor, public", flow(tcp, Hypervisor, "192.168.1.10", "198.51.100.10:443"), policy.StepRule, rules.Proxy, "exit", "hypervisor"},
		{"vm network, public", flow(tcp, "", "10.0.2.15", "198.51.100.10:443"), policy.StepRule, rules.Proxy, "exit", "vm"},
		{"vm interface, unlisted v6 source", vm(flow(tcp, "", "2001:db8::15", "[2001:db8:1::1]:443")), policy.StepCaged, rules.Block, "", policy.StepCaged.String()},
		{"vm interface, unlisted v4 source", vm(flow(tcp, "", "10.9.9.9", "198.51.100.10:80")), policy.StepCaged, rules.Block, "", policy.StepCaged.String()},
		{"host app, DoT by catch-all", flow(tcp, Chrome, "192.168.1.10", "1.1.1.1:853"), policy.StepDoT, rules.Block, "", policy.StepDoT.String()},
		{"host app, DoT by a direct rule", flow(tcp, Chrome, "192.168.1.10", "9.9.9.9:853"), policy.StepDoT, rules.Block, "", policy.StepDoT.String()},
		{"hypervisor, DoT through the proxy", flow(tcp, Hypervisor, "192.168.1.10", "1.1.1.1:853"), policy.StepRule, rules.Proxy, "exit", "hypervisor"},
		{"host app, DoQ", flow(udp, Chrome, "192.168.1.10", "1.1.1.1:853"), policy.StepDoT, rules.Block, "", policy.StepDoT.String()},
		{"host app, loopback", flow(tcp, Chrome, "127.0.0.1", "127.0.0.1:8080"), policy.StepLocal, rules.Direct, "", policy.StepLocal.String()},
		{"host app, own address", flow(tcp, Chrome, "192.168.1.10", "192.168.1.10:445"), policy.StepLocal, rules.Direct, "", policy.StepLocal.String()},
		{"host app, link-local", flow(tcp, Chrome, "192.168.1.10", "169.254.1.1:80"), policy.StepLocal, rules.Direct, "", policy.StepLocal.String()},
		{"host app, multicast", flow(udp, Chrome, "192.168.1.10", "224.0.0.251:5353"), policy.StepLocal, rules.Direct, "", policy.StepLocal.String()},
		{"hypervisor, model on loopback", flow(tcp, Hypervisor, "127.0.0.1", "127.0.0.1:47831"), policy.StepHost, rules.Direct, "", policy.StepHost.String()},
		{"hypervisor, ssh on loopback", flow(tcp, Hypervisor, "127.0.0.1", "127.0.0.1:22"), policy.StepHost, rules.Block, "", policy.StepHost.String()},
		{"hypervisor, smb on the host's address", flow(tcp, Hypervisor, "192.168.1.10", "192.168.1.10:445"), policy.StepHost, rules.Block, "", policy.StepHost.String()},
		{"hypervisor, link-local v6", flow(tcp, Hypervisor, "fe80::10", "[fe80::1]:443"), policy.StepHost, rules.Block, "", policy.StepHost.String()},
		{"vm network, forward", flow(tcp, "", "10.0.2.15", "192.168.56.1:47831"), policy.StepHost, rules.Direct, "", policy.StepHost.String()},
		{"vm network, DHCP", flow(udp, "", "10.0.2.15", "255.255.255.255:67"), policy.StepHost, rules.Direct, "", policy.StepHost.String()},
		{"host app, public DNS", flow(udp, Chrome, "192.168.1.10", "8.8.8.8:53"), policy.StepDNS, rules.Block, "", policy.StepDNS.String()},
		{"host app, DNS over TCP", flow(tcp, Chrome, "192.168.1.10", "8.8.8.8:53"), policy.StepDNS, rules.Block, "", policy.StepDNS.String()},
		{"host app, loopback stub resolver", flow(udp, Chrome, "127.0.0.1", "127.0.0.53:53"), policy.StepLocal, rules.Direct, "", policy.StepLocal.String()},
		{"host app, link-local resolver", flow(udp, Chrome, "fe80::10", "[fe80::1]:53"), policy.StepDNS, rules.Block, "", policy.StepDNS.String()},
		{"vm network, DNS to the NAT", flow(udp, "", "10.0.2.15", "10.0.2.3:53"), policy.StepDNS, rules.Block, "", policy.StepDNS.String()},
		{"host app, fake IP nobody was given", flow(tcp, Chrome, "192.168.1.10", PoolOrphan.String()+":443"), policy.StepNoName, rules.Block, "", policy.StepNoName.String()},
		{"host app, fake IP with its name", named(flow(tcp, Chrome, "192.168.1.10", PoolAddr.String()+":443"), PoolName), policy.StepRule, rules.Direct, "", "default"},
		{"hypervisor, fake IP with its name", named(flow(tcp, Hypervisor, "192.168.1.10", PoolAddr.String()+":443"), PoolName), policy.StepRule, rules.Proxy, "exit", "hypervisor"},
		{"host app, blocked host", flow(tcp, Chrome, "192.168.1.10", "203.0.113.66:80"), policy.StepRule, rules.Block, "", "blocked"},
		{"vm interface, blocked host", vm(flow(tcp, "", "10.9.9.9", "203.0.113.66:80")), policy.StepRule, rules.Block, "", "blocked"},
		{"vm network, UDP", flow(udp, "", "10.0.2.15", "198.51.100.7:443"), policy.StepRule, rules.Proxy, "exit", "vm"},
		{"host app, UDP", flow(udp, Chrome, "192.168.1.10", "198.51.100.7:443"), policy.StepRule, rules.Direct, "", "default"},
		{"host app, past a disabled rule", flow(tcp, Chrome, "192.168.1.10", "198.51.100.99:80"), policy.StepRule, rules.Direct, "", "default"},
	}
}

// ScopeConfig is Config with [capture] local and [dns] capture as given (dnsCapture "" keeps
// the default), written for Windows: the VM network is a cage subnet there. Parse it with
// conf.Options{OS: "windows"}: Linux ties the DNS scope to local and refuses the mixes.
func ScopeConfig(local bool, dnsCapture string) string {
	s := strings.Replace(Config, "local = true", fmt.Sprintf("local = %v", local), 1)
	s = strings.Replace(s, "vm_networks", "cage_subnets", 1)
	if dnsCapture != "" {
		s = strings.Replace(s, "[dns]\n", fmt.Sprintf("[dns]\ncapture = %q\n", dnsCapture), 1)
	}
	return s
}

// ScopeCases are the flows whose decision depends on [capture] local and [dns] capture,
// decided under ScopeConfig(local, dnsCapture) (dnsCapture "" is the default: "all" with
// local, "caged" without). A caged process's DNS is always answered; another process's only
// with "all"; without local this host's own uncaged flows go direct whatever the rules say.
func ScopeCases(local bool, dnsCapture string) []Case {
	tcp, udp := rules.TCP, rules.UDP
	all := dnsCapture == "all" || dnsCapture == "" && local
	hostDNS := Case{"host app, DNS", flow(udp, Chrome, "192.168.1.10", "8.8.8.8:53"), policy.StepDNS, rules.Block, "", policy.StepDNS.String()}
	hostDNSTCP := Case{"host app, DNS over TCP", flow(tcp, Chrome, "192.168.1.10", "8.8.8.8:53"), policy.StepDNS, rules.Block, "", policy.StepDNS.String()}
	if !all {
		hostDNS.Step, hostDNS.Action, hostDNS.Rule = policy.StepDNSUncaged, rules.Direct, policy.StepDNSUncaged.String()
		hostDNSTCP.Step, hostDNSTCP.Action, hostDNSTCP.Rule = policy.StepDNSUncaged, rules.Direct, policy.StepDNSUncaged.String()
	}
	own := func(name string, f policy.Flow, step policy.Step, a rules.Action, rule string) Case {
		if !local {
			return Case{name, f, policy.StepUncaptured, rules.Direct, "", policy.StepUncaptured.String()}
		}
		return Case{name, f, step, a, "", rule}
	}
	return []Case{
		hostDNS,
		hostDNSTCP,
		{"hypervisor, DNS", flow(udp, Hypervisor, "192.168.1.10", "8.8.8.8:53"), policy.StepDNS, rules.Block, "", policy.StepDNS.String()},
		{"hypervisor, DNS over TCP", flow(tcp, Hypervisor, "192.168.1.10", "8.8.8.8:53"), policy.StepDNS, rules.Block, "", policy.StepDNS.String()},
		{"vm network, DNS", flow(udp, "", "10.0.2.15", "10.0.2.3:53"), policy.StepDNS, rules.Block, "", policy.StepDNS.String()},
		{"hypervisor, public", flow(tcp, Hypervisor, "192.168.1.10", "198.51.100.10:443"), policy.StepRule, rules.Proxy, "exit", "hypervisor"},
		{"hypervisor, UDP", flow(udp, Hypervisor, "192.168.1.10", "198.51.100.7:443"), policy.StepRule, rules.Proxy, "exit", "hypervisor"},
		own("host app, public", flow(tcp, Chrome, "192.168.1.10", "198.51.100.10:443"), policy.StepRule, rules.Direct, "default"),
		own("host app, blocked host", flow(tcp, Chrome, "192.168.1.10", "203.0.113.66:80"), policy.StepRule, rules.Block, "blocked"),
		own("host app, UDP", flow(udp, Chrome, "192.168.1.10", "198.51.100.7:443"), policy.StepRule, rules.Direct, "default"),
		own("host app, DoT", flow(tcp, Chrome, "192.168.1.10", "1.1.1.1:853"), policy.StepDoT, rules.Block, policy.StepDoT.String()),
		{"host app, loopback", flow(tcp, Chrome, "127.0.0.1", "127.0.0.1:8080"), policy.StepLocal, rules.Direct, "", policy.StepLocal.String()},
	}
}

// LocalProxyConfig is the config of ResolvedCases: the VM's upstream runs on this host (an
// `ssh -D`, tor or sing-box on 127.0.0.1), a second VM network goes through a remote one,
// and a name rule sends some fake-IP names direct.
const LocalProxyConfig = `
[proxy.local]
address = "127.0.0.1:1080"

[proxy.remote]
address = "192.0.2.1:1080"

[capture]
vm_networks = ["10.0.2.0/24", "10.0.3.0/24"]

[[forward]]
listen = "192.168.56.1:47831"
connect = "127.0.0.1:47831"
allow = ["10.0.2.0/24"]

[dns]
mode = "fake-ip"
proxy = "local"

[[rule]]
name = "named-direct"
hosts = ["*.direct.test"]
action = "direct"

[[rule]]
name = "vm-remote"
sources = ["10.0.3.0/24"]
action = "proxy"
proxy = "remote"

[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"
proxy = "local"

[[rule]]
name = "hypervisor"
apps = ["VBoxHeadless.exe"]
action = "proxy"
proxy = "local"

[[rule]]
name = "default"
action = "direct"
`

// ResolvedCases are flows to a fake IP whose name was resolved through the proxy's
// resolver (Flow.Resolved), decided under LocalProxyConfig. The relay resolves such names
// before it decides (policy.Policy.NeedsResolve); the Windows engine leaves these flows to
// the relay, and explain cannot resolve, so only the policy and the relay run them.
// NeedsResolve is whether the policy asks for the name's addresses (with Resolved nil).
func ResolvedCases() []ResolvedCase {
	tcp := rules.TCP
	named := func(app, src, dst, name string, resolved ...string) policy.Flow {
		f := flow(tcp, app, src, dst)
		f.Host = name
		f.Resolved = []netip.Addr{}
		for _, a := range resolved {
			f.Resolved = append(f.Resolved, netip.MustParseAddr(a))
		}
		return f
	}
	fake := PoolAddr.String()
	refused, step := policy.StepHostName.String(), policy.StepHostName
	return []ResolvedCase{
		{Case{"local proxy, name to loopback", named("", "10.0.2.15", fake+":8080", "loop.example", "127.0.0.1"), step, rules.Block, "", refused}, true},
		{Case{"local proxy, name to loopback v6", named("", "10.0.2.15", fake+":22", "loop.example", "::1"), step, rules.Block, "", refused}, true},
		{Case{"local proxy, name to the host's address", named("", "10.0.2.15", fake+":445", "smb.example", "203.0.113.5", "192.168.1.10"), step, rules.Block, "", refused}, true},
		{Case{"local proxy, name to link-local", named("", "10.0.2.15", fake+":80", "ll.example", "fe80::1"), step, rules.Block, "", refused}, true},
		{Case{"local proxy, name that does not resolve", named("", "10.0.2.15", fake+":443", "nx.example"), step, rules.Block, "", refused}, true},
		{Case{"local proxy, public name", named("", "10.0.2.15", fake+":443", "example.com", "203.0.113.5"), policy.StepRule, rules.Proxy, "local", "vm"}, true},
		{Case{"local proxy, name to the model's port", named("", "10.0.2.15", fake+":47831", "model.example", "127.0.0.1"), policy.StepRule, rules.Proxy, "local", "vm"}, true},
		{Case{"hypervisor through the local proxy, name to loopback", named(Hypervisor, "192.168.1.10", fake+":8080", "loop.example", "127.0.0.1"), step, rules.Block, "", refused}, true},
		{Case{"direct fake IP, name to loopback", named("", "10.0.2.15", fake+":80", "a.direct.test", "127.0.0.1"), step, rules.Block, "", refused}, true},
		{Case{"direct fake IP, public name", named("", "10.0.2.15", fake+":80", "a.direct.test", "203.0.113.5"), policy.StepRule, rules.Direct, "", "named-direct"}, true},
		{Case{"remote proxy, name to loopback", named("", "10.0.3.15", fake+":8080", "loop.example", "127.0.0.1"), policy.StepRule, rules.Proxy, "remote", "vm-remote"}, false},
		{Case{"host app, name to loopback", named(Chrome, "192.168.1.10", fake+":8080", "loop.example", "127.0.0.1"), policy.StepRule, rules.Direct, "", "default"}, false},
	}
}

// ResolvedCase is a Case whose flow's name was resolved, and whether the policy asks for
// that (NeedsResolve of the flow without Resolved).
type ResolvedCase struct {
	Case
	NeedsResolve bool
}

// CagedConfig names caged apps every way a config can: a proxy rule's apps, a block rule's
// apps and service, a direct rule's app (not caged), and a preset (its images go to
// [capture] caged_apps). CagedNames is its caged-app set in the order policy.CagedApps gives
// it, and CagedServices its caged services: the policy, the Windows guard's plan and the
// Windows UDP scope must all see exactly these.
const CagedConfig = `
[proxy.exit]
address = "192.0.2.1:1080"

[capture]
hypervisors = ["virtualbox"]

[[rule]]
name = "agent"
apps = ["code.exe"]
action = "proxy"
proxy = "exit"

[[rule]]
name = "no-telemetry"
apps = ["telemetry.exe"]
services = ["DiagTrack"]
action = "block"

[[rule]]
name = "browser"
apps = ["firefox.exe"]
action = "direct"

[[rule]]
name = "default"
action = "direct"
`

// CagedNames and CagedServices: see CagedConfig. The preset's images come last.
var (
	CagedNames    = []string{"code.exe", "telemetry.exe", "VirtualBoxVM.exe", "VBoxHeadless.exe", "VBoxNetNAT.exe"}
	CagedServices = []string{"diagtrack"} // services are kept lower-case
)
