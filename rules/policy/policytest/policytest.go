// Package policytest holds the flows that every path deciding flows must agree on: the
// policy itself, the Linux relay (package router), the Windows engine (package redirect)
// and `router explain`. Each path's tests run Cases through its own machinery and assert the
// same verdicts.
//
// The configs the cases are decided under are TOML files in testdata, embedded in the
// string variables that name them (Config, WallConfig, ...): read them, never assign them.
package policytest

import (
	_ "embed"
	"fmt"
	"net/netip"
	"slices"
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
//
//go:embed testdata/shared.toml
var Config string

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
	f := policy.Flow{Network: network, Src: netip.MustParseAddr(src), Dst: ap.Addr(), Port: ap.Port(), Owner: rules.Owner{App: app}}
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
		{"hypervisor, DoT through the proxy", flow(tcp, Hypervisor, "192.168.1.10", "198.51.100.53:853"), policy.StepRule, rules.Proxy, "exit", "hypervisor"},
		{"hypervisor, DoT to a DoH resolver", flow(tcp, Hypervisor, "192.168.1.10", "1.1.1.1:853"), policy.StepDoH, rules.Block, "", policy.StepDoH.String()},
		{"vm network, DoH by address", flow(tcp, "", "10.0.2.15", "8.8.8.8:443"), policy.StepDoH, rules.Block, "", policy.StepDoH.String()},
		{"hypervisor, DoH by v6 address", flow(tcp, Hypervisor, "2001:db8::10", "[2606:4700:4700::1111]:443"), policy.StepDoH, rules.Block, "", policy.StepDoH.String()},
		{"vm network, DoH over QUIC", flow(udp, "", "10.0.2.15", "1.0.0.1:443"), policy.StepDoH, rules.Block, "", policy.StepDoH.String()},
		{"vm network, DNS to a DoH resolver", flow(udp, "", "10.0.2.15", "1.1.1.1:53"), policy.StepDNS, rules.Block, "", policy.StepDNS.String()},
		{"host app, DoH endpoint", flow(tcp, Chrome, "192.168.1.10", "8.8.8.8:443"), policy.StepRule, rules.Direct, "", "default"},
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
//
//go:embed testdata/local-proxy.toml
var LocalProxyConfig string

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
		{Case{"local proxy, name to the model's target", named("", "10.0.2.15", fake+":47831", "model.example", "127.0.0.1"), step, rules.Block, "", refused}, true},
		{Case{"local proxy, name to the forward's address", named("", "10.0.2.15", fake+":47831", "model.example", "192.168.56.1"), policy.StepRule, rules.Proxy, "local", "vm"}, true},
		{Case{"local proxy, name to another guest", named("", "10.0.2.15", fake+":22", "guest.example", "10.0.3.20"), policy.StepToGuest, rules.Block, "", policy.StepToGuest.String()}, true},
		{Case{"hypervisor through the local proxy, name to the model's target", named(Hypervisor, "192.168.1.10", fake+":47831", "model.example", "127.0.0.1"), policy.StepRule, rules.Proxy, "local", "hypervisor"}, true},
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
//
//go:embed testdata/caged.toml
var CagedConfig string

// CagedNames and CagedServices: see CagedConfig. The preset's images come last.
var (
	CagedNames    = []string{"code.exe", "telemetry.exe", "VirtualBoxVM.exe", "VBoxHeadless.exe", "VBoxNetNAT.exe"}
	CagedServices = []string{"diagtrack"} // services are kept lower-case
)

// WallConfig is the config of WallCases, the host walls (see package policy, walls.go): the
// lab's setup, with the model forwarded from the host's VM-facing address 10.0.2.2 to its
// loopback for one guest, two inbounds there for the whole guest network, a second VM
// network (another guest), guests known only as an inbound's clients (10.0.5.0/24, behind
// its own VM-facing address 10.0.5.1) and as a forward's (10.0.6.0/24), a forward open to
// every source (an allow of a whole family names no guest's network), a direct rule naming a host address and port, one naming
// another guest's address and port, a direct rule by name (*.corp.test), a direct rule
// for one port on every address (a catch-all for the walls), and the caged traffic sent
// through the proxy. Every rule names addresses or ports, no host name before the name
// rule, so that explain and the Windows engine decide as the relay.
//
//go:embed testdata/walls.toml
var WallConfig string

// WallHostAddrs are the host's own addresses of WallCases: its VM-facing address and its
// uplink, as in the namespace lab.
var WallHostAddrs = []netip.Addr{netip.MustParseAddr("10.0.2.2"), netip.MustParseAddr("10.0.5.1"), netip.MustParseAddr("198.51.100.2")}

// WallEnv is the policy environment of WallCases.
func WallEnv() policy.Env {
	return policy.Env{Scoped: true, HostAddr: func(a netip.Addr) bool { return slices.Contains(WallHostAddrs, a) }}
}

// Paths a wall case is driven through (WallCase.Paths).
type Path uint8

const (
	Transparent Path = 1 << iota // the transparent TCP or UDP path (with the case's network)
	Inbound                      // the inbounds (SOCKS5 and HTTP CONNECT): a guest's TCP asking for the destination
	Explain                      // `router explain` (no resolved names: it cannot resolve)
)

// WallCase is a flow and the decision every path must reach under WallConfig. A case
// whose flow has a name (Host) and no address asks for the name only, as an inbound's
// client does; the transparent paths give it a fake IP with that name. Resolved is what
// the name resolves to through the proxy (a name with Resolved nil is not looked up).
type WallCase struct {
	Case
	Paths Path
}

// WallCases are the host walls' shared cases.
func WallCases() []WallCase {
	tcp, udp := rules.TCP, rules.UDP
	all := Transparent | Inbound | Explain
	vm := func(network rules.Network, dst string) policy.Flow {
		f := flow(network, "", "10.0.2.15", dst)
		f.FromVM = true
		return f
	}
	carrier := func(dst string) policy.Flow { return flow(tcp, "VBoxHeadless", "127.0.0.1", dst) }
	named := func(network rules.Network, name string, port uint16, resolved ...string) policy.Flow {
		f := policy.Flow{Network: network, Src: netip.MustParseAddr("10.0.2.15"), Port: port, Host: name, FromVM: true, Resolved: []netip.Addr{}}
		for _, a := range resolved {
			f.Resolved = append(f.Resolved, netip.MustParseAddr(a))
		}
		return f
	}
	host, guest, hostName := policy.StepHost, policy.StepToGuest, policy.StepHostName
	refused := func(name string, f policy.Flow, s policy.Step, paths Path) WallCase {
		return WallCase{Case{name, f, s, rules.Block, "", s.String()}, paths}
	}
	open := func(name string, f policy.Flow, paths Path) WallCase {
		return WallCase{Case{name, f, host, rules.Direct, "", host.String()}, paths}
	}
	byRule := func(name string, f policy.Flow, a rules.Action, proxy, rule string, paths Path) WallCase {
		return WallCase{Case{name, f, policy.StepRule, a, proxy, rule}, paths}
	}
	return []WallCase{
		open("vm, the forward's address", vm(tcp, "10.0.2.2:47831"), all),
		open("vm, the inbound's address", vm(tcp, "10.0.2.2:1080"), all),
		refused("vm, the forward's target on loopback", vm(tcp, "127.0.0.1:47831"), host, all),
		refused("vm, loopback on the inbound's port", vm(tcp, "127.0.0.1:1080"), host, all),
		refused("vm, ::1 on the inbound's port", vm(tcp, "[::1]:1080"), host, all),
		// No capture hands over a connection to an unspecified address (the kernel takes it
		// for one of this machine's): the transparent listener refuses it as a capture fault.
		refused("vm, 0.0.0.0 on the inbound's port", vm(tcp, "0.0.0.0:1080"), host, Inbound|Explain),
		refused("vm, :: on the inbound's port", vm(tcp, "[::]:1080"), host, Inbound|Explain),
		refused("vm, the uplink address on the forward's port", vm(tcp, "198.51.100.2:47831"), host, all),
		refused("vm, ssh on the VM-facing address", vm(tcp, "10.0.2.2:22"), host, all),
		refused("vm, link-local metadata", vm(tcp, "169.254.169.254:80"), host, all),
		refused("vm, link-local v6", vm(tcp, "[fe80::1]:80"), host, all),
		refused("vm, loopback by a catch-all range", vm(tcp, "127.0.0.1:9000"), host, all),
		byRule("vm, a host address and port a direct rule names", vm(tcp, "10.0.2.2:8080"), rules.Direct, "", "gateway-web", all),
		refused("vm, another guest", vm(tcp, "10.0.4.15:22"), guest, all),
		refused("vm, another guest by a catch-all range", vm(tcp, "10.0.4.15:9000"), guest, all),
		byRule("vm, another guest's address a rule names", vm(tcp, "10.0.4.40:80"), rules.Direct, "", "guest-web", all),
		refused("vm, a guest known from an inbound's allow", vm(tcp, "10.0.5.7:22"), guest, all),
		refused("vm, a guest known from an inbound's allow by a catch-all range", vm(tcp, "10.0.5.7:9000"), guest, all),
		refused("vm, a guest known from a forward's allow", vm(tcp, "10.0.6.7:80"), guest, all),
		open("vm, the VM-facing address of the inbound's guests", vm(tcp, "10.0.5.1:1080"), all),
		byRule("vm, public", vm(tcp, "203.0.113.10:80"), rules.Proxy, "exit", "vm", all),
		byRule("vm, public by a catch-all range", vm(tcp, "203.0.113.10:9000"), rules.Direct, "", "every-9000", all),
		open("carrier, the forward's target", carrier("127.0.0.1:47831"), Transparent|Explain),
		refused("carrier, ssh on loopback", carrier("127.0.0.1:22"), host, Transparent|Explain),
		refused("carrier, another guest", carrier("10.0.4.15:22"), guest, Transparent|Explain),
		refused("carrier, a guest behind an inbound", carrier("10.0.5.7:22"), guest, Transparent|Explain),
		refused("vm udp, loopback", vm(udp, "127.0.0.1:2223"), host, Transparent|Explain),
		refused("vm udp, ::1", vm(udp, "[::1]:2223"), host, Transparent|Explain),
		refused("vm udp, the VM-facing address", vm(udp, "10.0.2.2:2223"), host, Transparent|Explain),
		open("vm udp, DHCP", vm(udp, "10.0.2.2:67"), Transparent|Explain),
		refused("vm udp, another guest", vm(udp, "10.0.4.15:5000"), guest, Transparent|Explain),
		refused("vm udp, a guest behind an inbound", vm(udp, "10.0.5.7:5000"), guest, Transparent|Explain),
		refused("name to loopback", named(tcp, "loop.corp.test", 2222, "127.0.0.1"), hostName, Transparent|Inbound),
		refused("name to 0.0.0.0", named(tcp, "zero.corp.test", 2222, "0.0.0.0"), hostName, Transparent|Inbound),
		refused("name to ::1", named(tcp, "six.corp.test", 2222, "::1"), hostName, Transparent|Inbound),
		refused("name to link-local", named(tcp, "meta.corp.test", 80, "169.254.169.254"), hostName, Transparent|Inbound),
		refused("name to the uplink address", named(tcp, "up.corp.test", 47831, "198.51.100.2"), hostName, Transparent|Inbound),
		refused("name to another guest", named(tcp, "guest.corp.test", 22, "10.0.4.15"), guest, Transparent|Inbound),
		refused("name to a guest behind an inbound", named(tcp, "inbound.corp.test", 22, "10.0.5.7"), guest, Transparent|Inbound),
		refused("name to a guest behind a forward", named(tcp, "forward.corp.test", 80, "10.0.6.7"), guest, Transparent|Inbound),
		refused("name to a public address and loopback", named(tcp, "two.corp.test", 2222, "203.0.113.5", "127.0.0.1"), hostName, Transparent|Inbound),
		refused("name that does not resolve", named(tcp, "nx.corp.test", 80), hostName, Transparent|Inbound),
		byRule("name to a public address", named(tcp, "www.corp.test", 80, "203.0.113.5"), rules.Direct, "", "corp", Transparent|Inbound),
		byRule("name to the inbound's address", named(tcp, "gw.corp.test", 1080, "10.0.2.2"), rules.Direct, "", "corp", Transparent|Inbound),
		refused("udp name to loopback", named(udp, "loop.corp.test", 2223, "127.0.0.1"), hostName, Transparent),
		refused("udp name to ::1", named(udp, "six.corp.test", 2223, "::1"), hostName, Transparent),
		refused("udp name to 0.0.0.0", named(udp, "zero.corp.test", 2223, "0.0.0.0"), hostName, Transparent),
		refused("udp name to link-local", named(udp, "meta.corp.test", 2223, "169.254.169.254"), hostName, Transparent),
		refused("udp name to another guest", named(udp, "guest.corp.test", 5000, "10.0.4.15"), guest, Transparent),
		refused("udp name to a guest behind an inbound", named(udp, "inbound.corp.test", 5000, "10.0.5.7"), guest, Transparent),
		byRule("udp name to a public address", named(udp, "www.corp.test", 5000, "203.0.113.5"), rules.Direct, "", "corp", Transparent),
	}
}

// NameConfig is the config of NameCases: an allow-list by name for the guest network (one
// name and its subdomains through the proxy, an HTTP/3 rule written for UDP), a block rule
// by address, and the host's own catch-all; nothing else, so that whatever the guest sends
// without an allowed name falls to the caged end.
//
//go:embed testdata/names.toml
var NameConfig string

// Fake IPs of NameCases, each given for one name (NameFakes).
var (
	AllowedFake = netip.MustParseAddr("198.18.0.20")
	DeniedFake  = netip.MustParseAddr("198.18.0.21")
	H3Fake      = netip.MustParseAddr("198.18.0.22")
	NameFakes   = map[netip.Addr]string{AllowedFake: "allowed.test", DeniedFake: "denied.test", H3Fake: "h3.allowed.test"}
)

// NameCase is a Case decided under NameConfig whose flow may carry a name in its first
// bytes (Flow.Sniffed): From says how a data path's client sends it ("sni": a TLS
// ClientHello; "host": an HTTP/1 request; "" sends nothing, as a server-speaks-first
// client). A fake IP's Flow.Host is the name NameFakes gives it.
type NameCase struct {
	Case
	From string
}

// NameCases are the flows of an allow-list by name: the name from the fake IP, the TLS
// server name or the HTTP Host, each allowed or not; the fake IP's name against another
// one in the first bytes; an unnamed flow; QUIC. The policy, the relay (which reads the
// name from the client's bytes) and explain (--name, --sni) must agree on them.
func NameCases() []NameCase {
	tcp, udp := rules.TCP, rules.UDP
	guest := func(network rules.Network, dst netip.Addr, port uint16, sniffed string) policy.Flow {
		return policy.Flow{Network: network, Src: netip.MustParseAddr("10.0.2.15"), Dst: dst, Port: port, Host: NameFakes[dst], Sniffed: sniffed}
	}
	bare := netip.MustParseAddr("203.0.113.7")
	blocked := netip.MustParseAddr("203.0.113.66")
	caged, mismatch, quic := policy.StepCaged.String(), policy.StepNameMismatch.String(), policy.StepQUIC.String()
	return []NameCase{
		{Case{"fake IP, allowed", guest(tcp, AllowedFake, 443, ""), policy.StepRule, rules.Proxy, "exit", "allowed"}, ""},
		{Case{"fake IP, allowed, its SNI", guest(tcp, AllowedFake, 443, "allowed.test"), policy.StepRule, rules.Proxy, "exit", "allowed"}, "sni"},
		{Case{"fake IP, allowed, its Host", guest(tcp, AllowedFake, 80, "allowed.test"), policy.StepRule, rules.Proxy, "exit", "allowed"}, "host"},
		{Case{"fake IP, allowed, another SNI", guest(tcp, AllowedFake, 443, "denied.test"), policy.StepNameMismatch, rules.Block, "", mismatch}, "sni"},
		{Case{"fake IP, allowed, an allowed subdomain's SNI", guest(tcp, AllowedFake, 443, "www.allowed.test"), policy.StepNameMismatch, rules.Block, "", mismatch}, "sni"},
		{Case{"fake IP, allowed, another Host", guest(tcp, AllowedFake, 80, "denied.test"), policy.StepNameMismatch, rules.Block, "", mismatch}, "host"},
		{Case{"fake IP, denied", guest(tcp, DeniedFake, 443, ""), policy.StepCaged, rules.Block, "", caged}, ""},
		{Case{"fake IP, denied, its SNI", guest(tcp, DeniedFake, 443, "denied.test"), policy.StepCaged, rules.Block, "", caged}, "sni"},
		{Case{"fake IP, denied, an allowed SNI", guest(tcp, DeniedFake, 443, "allowed.test"), policy.StepNameMismatch, rules.Block, "", mismatch}, "sni"},
		{Case{"address, allowed SNI", guest(tcp, bare, 443, "allowed.test"), policy.StepRule, rules.Proxy, "exit", "allowed"}, "sni"},
		{Case{"address, allowed subdomain SNI", guest(tcp, bare, 443, "api.allowed.test"), policy.StepRule, rules.Proxy, "exit", "allowed"}, "sni"},
		{Case{"address, allowed Host", guest(tcp, bare, 80, "allowed.test"), policy.StepRule, rules.Proxy, "exit", "allowed"}, "host"},
		{Case{"address, denied SNI", guest(tcp, bare, 443, "denied.test"), policy.StepCaged, rules.Block, "", caged}, "sni"},
		{Case{"address, denied Host", guest(tcp, bare, 80, "denied.test"), policy.StepCaged, rules.Block, "", caged}, "host"},
		{Case{"address, a look-alike SNI", guest(tcp, bare, 443, "allowed.test.evil.test"), policy.StepCaged, rules.Block, "", caged}, "sni"},
		{Case{"address, no name", guest(tcp, bare, 443, ""), policy.StepCaged, rules.Block, "", caged}, ""},
		{Case{"blocked address, allowed SNI", guest(tcp, blocked, 443, "allowed.test"), policy.StepRule, rules.Proxy, "exit", "allowed"}, "sni"},
		{Case{"blocked address, no name", guest(tcp, blocked, 443, ""), policy.StepRule, rules.Block, "", "blocked"}, ""},
		{Case{"quic, allowed name", guest(udp, AllowedFake, 443, ""), policy.StepQUIC, rules.Block, "", quic}, ""},
		{Case{"quic, a rule written for udp", guest(udp, H3Fake, 443, ""), policy.StepRule, rules.Proxy, "exit", "h3"}, ""},
		{Case{"udp to another port, allowed name", guest(udp, AllowedFake, 8443, ""), policy.StepRule, rules.Proxy, "exit", "allowed"}, ""},
		{Case{"quic, address", guest(udp, bare, 443, ""), policy.StepCaged, rules.Block, "", caged}, ""},
	}
}
