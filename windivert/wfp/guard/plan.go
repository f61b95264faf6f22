package guard

import (
	"cmp"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf16"

	"github.com/agentcage/router/internal/ports"
	"github.com/agentcage/router/windivert/wfp"
)

// Env is everything the plan depends on, as plain data: the caller derives it from the
// config and the machine (ResolveApps for the caged apps).
type Env struct {
	// CagedApps are the absolute paths of the caged executables: the apps of the config's
	// proxy and block rules and the known hypervisor images. Case and duplicates do not
	// matter. Empty: no app is caged and the app filters are left out.
	CagedApps []string
	// SystemRoot is the Windows directory (%SystemRoot%; "": C:\Windows). The caged apps
	// that are Windows' own images (SystemImage) are left out of the plan: never guarded
	// by path.
	SystemRoot string
	// CagedServices are the Windows services the config's proxy and block rules name:
	// blocked by their service SID (the token of the process that hosts them carries it
	// when the service's SID type is not "none"), like the caged apps. Case and duplicates
	// do not matter.
	CagedServices []string
	// Router is the absolute path of router.exe (required).
	Router string
	// Service is the Windows service name when the router runs as a service; its service
	// SID then joins router.exe's app ID in the router's permits. Empty in the foreground.
	Service string
	// Listeners are the TCP ports of the transparent listener. Reflected connections
	// arrive there with the original destination as their source, so any source is let in.
	Listeners []uint16
	// DNSPorts are the ports (UDP and TCP) the router answers DNS on; any source.
	DNSPorts []uint16
	// Forwards are the model forwards: reachable only from their allowed sources.
	Forwards []Forward
	// Inbounds are the explicit proxies ([[inbound]]): reachable only from their allowed
	// sources, like the forwards.
	Inbounds []Inbound
	// HostPorts are further TCP ports of this machine the caged apps may reach (a model
	// server a direct rule names, e.g. 127.0.0.1:47831 reached through VirtualBox's NAT).
	HostPorts []uint16
	// DNSAll mirrors the config's [dns] capture = "all" (the default with local = true):
	// the router answers every process's DNS, so DNS (53) and DoT (853) are blocked for
	// every process but the router, and port 53 let through to the capture while it runs.
	// With "caged" only the caged apps' DNS is the router's, and they are blocked anyway.
	DNSAll bool
	// CagedUDP, when not nil, are the only UDP destination ports the caged apps may send to
	// while the router runs (DNS, and the ports of the direct rules that may take their
	// flows): their other UDP, which the capture would drop anyway, is refused before it is
	// sent, and the capture need not take the host's other UDP at all. Nil: any port.
	CagedUDP []wfp.PortRange
	// OwnPorts are the source ports reserved for the router's own sockets, which the
	// capture's filters leave out (their packets never cross user mode): while the router
	// runs, only its process may connect from them (R0, R1), so no other process that
	// manages to bind one escapes the capture.
	OwnPorts []wfp.PortRange
	// CageSubnets are the subnets of Hyper-V internal switches (or any network the host
	// might route for): nothing from them is forwarded, in any state, and the host takes
	// no connection from them but at the router's forwards and inbounds and DHCP (the
	// walls, A1 to A3).
	CageSubnets []netip.Prefix
	// VMAdapters are the VM-facing adapters whose guests the host is walled from (what
	// `router adapters` lists for VirtualBox host-only and VMware VMnet, and the Hyper-V
	// switches of CageSubnets): a connection arriving on one, or from one of its subnets,
	// reaches this machine only at the router's forwards and inbounds and DHCP, in every
	// state. Order does not matter.
	VMAdapters []VMAdapter
}

// VMAdapter is one VM-facing adapter: its interface LUID (zero when unknown: then only its
// subnets are walled) and the networks of its addresses.
type VMAdapter struct {
	Name    string
	LUID    uint64
	Subnets []netip.Prefix
}

// LinkLocal are the link-local networks (169.254.0.0/16, fe80::/10): a cloud host's
// metadata service (169.254.169.254 and fd00:ec2::254 aside) and any neighbour's
// self-assigned address live there, so a caged app never reaches them (P4).
var LinkLocal = []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fe80::/10")}

// hypervisorLoopback is the hypervisors' own use of this machine that the wall P2 must
// leave open: an image (lower case) and the TCP ports on this machine it talks to. VMware's
// vmware-vmx.exe talks to its authorization service (vmware-authd) on 902 and 912; it
// carries no guest's NAT traffic (vmnat.exe does, and stays walled).
var hypervisorLoopback = []struct {
	image string
	ports []uint16
}{
	{"vmware-vmx.exe", []uint16{902, 912}},
}

// Forward is one model forward: the router listens on Listen and takes connections from
// Allow only. Connect is where it forwards to; a loopback Connect's port is one caged apps
// may reach on this machine directly (VirtualBox's NAT turns the guest's 10.0.2.2 into a
// connection from VirtualBoxVM.exe to 127.0.0.1).
type Forward struct {
	Listen  netip.AddrPort
	Connect netip.AddrPort
	Allow   []netip.Prefix
}

// Inbound is one explicit proxy: the router listens on Listen and takes connections from
// Allow only.
type Inbound struct {
	Listen netip.AddrPort
	Allow  []netip.Prefix
}

// Plan is the guard's WFP objects: the provider and sublayer, the filters Install keeps
// (persistent and boot-time) and those Arm adds in a dynamic session while the capture
// runs. Build it with NewPlan; every key and the order of everything are deterministic.
type Plan struct {
	Env        Env // normalized: apps sorted, deduplicated
	Provider   wfp.Provider
	Sublayer   wfp.Sublayer
	Persistent []wfp.Filter
	Dynamic    []wfp.Filter
}

// namespace is the UUIDv5 namespace of every key of the guard. Never change it: a new
// value would leave the objects an older router installed behind.
var namespace = wfp.Key{0x1f, 0xba, 0x49, 0x30, 0xb2, 0x8a, 0x4f, 0x7f, 0xa8, 0x6e, 0x8d, 0xc0, 0x63, 0x77, 0xd8, 0xab}

// Keys and weights that do not depend on the config.
var (
	ProviderKey = wfp.NameKey(namespace, "provider")
	SublayerKey = wfp.NameKey(namespace, "sublayer")
)

// SublayerWeight puts the guard's sublayer above Windows Defender Firewall's (so the
// router's hard permits are evaluated first and its blocks cannot be undone by a hard
// permit of the firewall) and just below the 0xFFFF that VPN kill switches take.
const SublayerWeight uint16 = 0xFFF0

// The filters, by the id of the design (weights are within the guard's sublayer):
//
//	id  layer         weight  action       conditions                                      lifetime
//	R0  connect       17      permit       router (+SID), local port reserved for it        dynamic
//	R1  connect       16      block        local port reserved for the router (the others)  dynamic
//	P1  connect       15      permit       caged app, this machine, TCP, host ports         persistent
//	                                       (and vmware-vmx.exe to authd's 902, 912)
//	P2  connect       14      block        caged app, this machine                          persistent
//	P4  connect       11      block        caged app, remote link-local                     persistent
//	A0  accept        14      block        listener/DNS ports, from a VM-facing adapter or  persistent
//	                                       subnet, not loopback
//	D3  accept        13      hard permit  router (+SID), listener/DNS ports, any source     dynamic
//	                                       router (+SID), forward or inbound addr:port,
//	                                       allowed source
//	D4  accept        12      block        router, forward and inbound ports (the other     dynamic
//	                                       sources)
//	D1  connect       10      permit       caged app, TCP or UDP (never ICMP); UDP only to  dynamic
//	                                       CagedUDP's ports when given
//	D2  connect       4       permit       UDP/TCP to port 53 (DNS scope "all" only)        dynamic
//	S2  connect       3       hard permit  router (+SID), UDP/TCP to 53/853 ("all" only)    persistent
//	S1  connect       2       block        UDP/TCP to 53/853 ("all" only)                   persistent + boot-time
//	P3  connect       1       block        caged app (any protocol: TCP, UDP, ICMP)         persistent + boot-time
//	    (the same P3 and D1 with a caged service's SID instead of an app, "P3 services")
//	A1  accept        9       permit       UDP to the DHCP server port (67, 547)            persistent
//	A2  accept        8       block        arrived on a VM-facing adapter, not loopback     persistent + boot-time
//	A3  accept        8       block        remote in a VM-facing or cage subnet, not        persistent + boot-time
//	                                       loopback
//	H1  forward       1       block        source in a cage subnet                          persistent + boot-time
//
// The walls A1 to A3 hold for every listener of this machine (SMB, RDP, anything on
// 0.0.0.0), whether the router runs or not; while it runs, D3 (weight 13) lets its forwards
// and inbounds take their allowed sources and D4 refuses the rest. "Not loopback" keeps
// this machine's own connections out of them, also those made to its own address on a
// VM-facing adapter (a hypervisor's console to vmware-authd, a resolver on loopback that
// a NAT process asks). A0 keeps the guests off the router's own transparent listener and
// DNS port too, which D3 opens to any source (a reflected connection carries the original
// destination as its source): the engine reflects a caged app's connection on the
// interface it was leaving by, and a proxied flow never leaves by a VM-facing adapter.
//
// "This machine" is the loopback condition flag: Windows sets it when both ends are this
// host, whatever the address (127/8, ::1, the LAN or host-only address), which is exactly
// "the host is off limits". There is no address list to keep up to date.
const (
	weightR0 = 17
	weightR1 = 16
	weightP1 = 15
	weightP2 = 14
	weightA0 = 14
	weightD3 = 13
	weightD4 = 12
	weightP4 = 11
	weightP5 = 11
	weightD1 = 10
	weightA1 = 9
	weightA2 = 8
	weightA3 = 8
	weightD2 = 4
	weightS2 = 3
	weightS1 = 2
	weightP3 = 1
	weightH1 = 1
)

// NewPlan returns the plan for env, or an error naming what in env cannot be planned.
func NewPlan(env Env) (Plan, error) {
	env, err := normalize(env)
	if err != nil {
		return Plan{}, fmt.Errorf("plan guard: %w", err)
	}
	p := Plan{
		Env:      env,
		Provider: wfp.Provider{Key: ProviderKey, Name: "router guard", Persistent: true},
		Sublayer: wfp.Sublayer{Key: SublayerKey, Provider: ProviderKey, Name: "router guard: caged apps blocked unless the router runs", Weight: SublayerWeight, Persistent: true},
	}
	var apps []wfp.Condition
	for _, a := range env.CagedApps {
		apps = append(apps, wfp.App(a))
	}
	router := []wfp.Condition{wfp.App(env.Router)}
	if env.Service != "" {
		router = append(router, wfp.User(ServiceSID(env.Service)))
	}
	tcpUDP := []wfp.Condition{wfp.Protocol(wfp.ProtoTCP), wfp.Protocol(wfp.ProtoUDP)}
	dns := []wfp.Condition{wfp.RemotePort(wfp.Port(ports.DNS)), wfp.RemotePort(wfp.Port(ports.DoT))}

	connect := []wfp.Layer{wfp.LayerConnectV4, wfp.LayerConnectV6}
	accept := []wfp.Layer{wfp.LayerAcceptV4, wfp.LayerAcceptV6}
	var add addFunc = func(dst *[]wfp.Filter, id, what string, layers []wfp.Layer, w uint64, a wfp.Action, hard bool, lt lifetime, conds ...[]wfp.Condition) {
		for _, l := range layers {
			var cs []wfp.Condition
			for _, c := range conds {
				cs = append(cs, c...)
			}
			for _, boot := range lt.variants() {
				f := wfp.Filter{Layer: l, Weight: w, Action: a, Hard: hard, Provider: ProviderKey, Sublayer: SublayerKey, Conditions: cs}
				name := id + " " + l.String()
				f.Name = fmt.Sprintf("router guard %s: %s (%s)", id, what, l)
				switch {
				case boot:
					f.BootTime = true
					name += " boot-time"
					f.Name = fmt.Sprintf("router guard %s: %s (%s, boot-time)", id, what, l)
				case lt != dynamic:
					f.Persistent = true
				}
				f.Key = wfp.NameKey(namespace, "filter "+name)
				sum := sha256.Sum256([]byte(f.String()))
				f.Digest = sum[:16]
				*dst = append(*dst, f)
			}
		}
	}

	if len(apps) > 0 {
		if ports := hostPorts(env); len(ports) > 0 {
			add(&p.Persistent, "P1", "caged apps may reach this machine on the forward and model ports", connect, weightP1, wfp.Permit, false, persistent,
				apps, []wfp.Condition{wfp.FlagsSet(wfp.FlagLoopback), wfp.Protocol(wfp.ProtoTCP)}, ports)
		}
		for _, h := range hypervisorLoopback {
			var these []wfp.Condition
			for _, a := range env.CagedApps {
				if strings.EqualFold(baseWin(a), h.image) {
					these = append(these, wfp.App(a))
				}
			}
			if len(these) > 0 {
				add(&p.Persistent, "P1 "+strings.TrimSuffix(h.image, ".exe"), "the hypervisor's own services on this machine", connect, weightP1, wfp.Permit, false, persistent,
					these, []wfp.Condition{wfp.FlagsSet(wfp.FlagLoopback), wfp.Protocol(wfp.ProtoTCP)}, portConds(wfp.RemotePort, h.ports))
			}
		}
		add(&p.Persistent, "P2", "caged apps may not reach this machine otherwise", connect, weightP2, wfp.Block, false, persistent,
			apps, []wfp.Condition{wfp.FlagsSet(wfp.FlagLoopback)})
		for _, l := range connect {
			for _, ll := range LinkLocal {
				if ll.Addr().Is6() == l.IPv6() {
					add(&p.Persistent, "P4", "caged apps may not reach link-local addresses (a cloud host's metadata service)", []wfp.Layer{l}, weightP4, wfp.Block, false, persistent,
						apps, []wfp.Condition{wfp.RemoteAddr(ll)})
				}
			}
		}
		if env.CagedUDP == nil {
			add(&p.Dynamic, "D1", "caged apps' TCP and UDP pass to the capture while the router runs", connect, weightD1, wfp.Permit, false, dynamic, apps, tcpUDP)
		} else {
			var udpPorts []wfp.Condition
			for _, r := range env.CagedUDP {
				udpPorts = append(udpPorts, wfp.RemotePort(r))
			}
			add(&p.Dynamic, "D1", "caged apps' TCP passes to the capture while the router runs", connect, weightD1, wfp.Permit, false, dynamic,
				apps, []wfp.Condition{wfp.Protocol(wfp.ProtoTCP)})
			add(&p.Dynamic, "D1 udp", "caged apps' UDP to DNS and the direct rules' ports passes to the capture while the router runs", connect, weightD1, wfp.Permit, false, dynamic,
				apps, []wfp.Condition{wfp.Protocol(wfp.ProtoUDP)}, udpPorts)
		}
		add(&p.Persistent, "P3", "caged apps are blocked unless the router runs", connect, weightP3, wfp.Block, false, persistentAndBoot, apps)
		// The hypervisors' NAT port forwards (VirtualBox's NAT rules, vmnat.exe's, QEMU's
		// hostfwd) listen in the caged processes: another machine never reaches a guest
		// through one, in every state; this host's own connections (loopback) still do.
		add(&p.Persistent, "P5", "caged apps take no connection from another machine (the hypervisors' NAT port forwards)", accept, weightP5, wfp.Block, false, persistentAndBoot,
			apps, []wfp.Condition{wfp.FlagsClear(wfp.FlagLoopback)})
	}
	if len(env.OwnPorts) > 0 {
		var own []wfp.Condition
		for _, r := range env.OwnPorts {
			own = append(own, wfp.LocalPort(r))
		}
		add(&p.Dynamic, "R0", "the router's own sockets use its reserved source ports", connect, weightR0, wfp.Permit, false, dynamic, router, own)
		add(&p.Dynamic, "R1", "no other process may connect from the router's reserved source ports (the capture leaves them out)", connect, weightR1, wfp.Block, false, dynamic, own)
	}
	if len(env.CagedServices) > 0 {
		var svcs []wfp.Condition
		for _, sv := range env.CagedServices {
			svcs = append(svcs, wfp.User(ServiceSID(sv)))
		}
		add(&p.Dynamic, "D1 services", "caged services' TCP and UDP pass to the capture while the router runs", connect, weightD1, wfp.Permit, false, dynamic, svcs, tcpUDP)
		add(&p.Persistent, "P3 services", "caged services (by service SID) are blocked unless the router runs", connect, weightP3, wfp.Block, false, persistentAndBoot, svcs)
	}
	if env.DNSAll {
		add(&p.Dynamic, "D2", "DNS passes to the capture while the router runs", connect, weightD2, wfp.Permit, false, dynamic,
			tcpUDP, []wfp.Condition{wfp.RemotePort(wfp.Port(ports.DNS))})
		add(&p.Persistent, "S2", "the router's own DNS", connect, weightS2, wfp.Permit, true, persistent, router, tcpUDP, dns)
		add(&p.Persistent, "S1", "DNS and DoT are blocked for every other process", connect, weightS1, wfp.Block, false, persistentAndBoot, tcpUDP, dns)
	}
	if ports := portConds(wfp.LocalPort, env.Listeners); len(ports) > 0 {
		add(&p.Dynamic, "D3 listener", "the router's transparent listener, from any source", accept, weightD3, wfp.Permit, true, dynamic,
			router, []wfp.Condition{wfp.Protocol(wfp.ProtoTCP)}, ports)
	}
	if ports := portConds(wfp.LocalPort, env.DNSPorts); len(ports) > 0 {
		add(&p.Dynamic, "D3 dns", "the router's DNS, from any source", accept, weightD3, wfp.Permit, true, dynamic, router, tcpUDP, ports)
	}
	var fwdPorts []uint16
	permitAllowed := func(id, what string, listen netip.AddrPort, allowed []netip.Prefix) {
		fwdPorts = append(fwdPorts, listen.Port())
		for _, l := range accept {
			var allow []wfp.Condition
			for _, a := range allowed {
				if a.Addr().Is6() == l.IPv6() {
					allow = append(allow, wfp.RemoteAddr(a))
				}
			}
			local := listen.Addr()
			if len(allow) == 0 || (!local.IsUnspecified() && local.Is6() != l.IPv6()) {
				continue
			}
			var at []wfp.Condition
			if !local.IsUnspecified() {
				at = append(at, wfp.LocalAddr(netip.PrefixFrom(local, local.BitLen())))
			}
			add(&p.Dynamic, id, what+" "+listen.String()+", from its allowed sources", []wfp.Layer{l}, weightD3, wfp.Permit, true, dynamic,
				router, []wfp.Condition{wfp.Protocol(wfp.ProtoTCP), wfp.LocalPort(wfp.Port(listen.Port()))}, at, allow)
		}
	}
	for i, f := range env.Forwards {
		permitAllowed(fmt.Sprintf("D3 forward %d", i+1), "the forward", f.Listen, f.Allow)
	}
	for i, in := range env.Inbounds {
		permitAllowed(fmt.Sprintf("D3 inbound %d", i+1), "the inbound", in.Listen, in.Allow)
	}
	if ports := portConds(wfp.LocalPort, fwdPorts); len(ports) > 0 {
		what := "the forwards refuse every other source"
		if len(env.Inbounds) > 0 {
			what = "the forwards and inbounds refuse every other source"
		}
		add(&p.Dynamic, "D4", what, accept, weightD4, wfp.Block, false, dynamic,
			[]wfp.Condition{wfp.App(env.Router), wfp.Protocol(wfp.ProtoTCP)}, ports)
	}
	p.walls(add)
	for _, l := range []wfp.Layer{wfp.LayerForwardV4, wfp.LayerForwardV6} {
		var src []wfp.Condition
		for _, s := range env.CageSubnets {
			if s.Addr().Is6() == l.IPv6() {
				src = append(src, wfp.SourceAddr(s))
			}
		}
		if len(src) > 0 {
			add(&p.Persistent, "H1", "nothing from a cage subnet is forwarded", []wfp.Layer{l}, weightH1, wfp.Block, false, persistentAndBoot, src)
		}
	}
	return p, nil
}

// addFunc is NewPlan's add: it appends one filter per layer (and boot-time twin).
type addFunc func(dst *[]wfp.Filter, id, what string, layers []wfp.Layer, w uint64, a wfp.Action, hard bool, lt lifetime, conds ...[]wfp.Condition)

// walls adds A0 to A3: the host takes no connection from the VM-facing adapters and the
// cage subnets but DHCP (and, while the router runs, its forwards and inbounds, by D3), and
// the router's listener and DNS port none from them at all (A0, above D3).
func (p *Plan) walls(add addFunc) {
	env := p.Env
	var luids []wfp.Condition
	var subnets []netip.Prefix
	for _, a := range env.VMAdapters {
		if a.LUID != 0 {
			luids = append(luids, wfp.Interface(a.LUID))
		}
		subnets = append(subnets, a.Subnets...)
	}
	subnets = append(subnets, env.CageSubnets...)
	slices.SortFunc(subnets, netip.Prefix.Compare)
	subnets = slices.Compact(subnets)
	if len(luids) == 0 && len(subnets) == 0 {
		return
	}
	notLoopback := []wfp.Condition{wfp.FlagsClear(wfp.FlagLoopback)}
	own := portConds(wfp.LocalPort, append(slices.Clone(env.Listeners), env.DNSPorts...))
	for _, l := range []wfp.Layer{wfp.LayerAcceptV4, wfp.LayerAcceptV6} {
		var from []wfp.Condition
		for _, s := range subnets {
			if s.Addr().Is6() == l.IPv6() {
				from = append(from, wfp.RemoteAddr(s))
			}
		}
		if len(own) > 0 && len(luids) > 0 {
			add(&p.Persistent, "A0", "the router's listener and DNS take no connection arriving on a VM-facing adapter", []wfp.Layer{l}, weightA0, wfp.Block, false, persistent,
				own, luids, notLoopback)
		}
		if len(own) > 0 && len(from) > 0 {
			add(&p.Persistent, "A0 subnets", "the router's listener and DNS take no connection from a VM-facing or cage subnet", []wfp.Layer{l}, weightA0, wfp.Block, false, persistent,
				own, from, notLoopback)
		}
		dhcp := ports.DHCPServer4 // a guest's DHCP reaches this machine through the walls
		if l.IPv6() {
			dhcp = ports.DHCPServer6
		}
		add(&p.Persistent, "A1", "a guest's DHCP passes the walls", []wfp.Layer{l}, weightA1, wfp.Permit, false, persistent,
			[]wfp.Condition{wfp.Protocol(wfp.ProtoUDP), wfp.LocalPort(wfp.Port(dhcp))})
		if len(luids) > 0 {
			add(&p.Persistent, "A2", "this machine takes no connection arriving on a VM-facing adapter", []wfp.Layer{l}, weightA2, wfp.Block, false, persistentAndBoot,
				luids, notLoopback)
		}
		if len(from) > 0 {
			add(&p.Persistent, "A3", "this machine takes no connection from a VM-facing or cage subnet", []wfp.Layer{l}, weightA3, wfp.Block, false, persistentAndBoot,
				from, notLoopback)
		}
	}
}

// baseWin is the file name of a Windows path.
func baseWin(p string) string {
	if i := strings.LastIndexAny(p, `\/`); i >= 0 {
		return p[i+1:]
	}
	return p
}

type lifetime uint8

const (
	persistent lifetime = iota
	persistentAndBoot
	dynamic
)

// variants returns, per filter to make, whether it is the boot-time twin.
func (l lifetime) variants() []bool {
	if l == persistentAndBoot {
		return []bool{false, true}
	}
	return []bool{false}
}

// hostPorts returns the remote-port conditions of P1: the forwards' and inbounds' listen
// ports, the ports of loopback forward targets and HostPorts, each once, in order.
func hostPorts(env Env) []wfp.Condition {
	var ports []uint16
	for _, f := range env.Forwards {
		ports = append(ports, f.Listen.Port())
		if f.Connect.Addr().IsLoopback() {
			ports = append(ports, f.Connect.Port())
		}
	}
	for _, in := range env.Inbounds {
		ports = append(ports, in.Listen.Port())
	}
	ports = append(ports, env.HostPorts...)
	return portConds(wfp.RemotePort, ports)
}

func portConds(mk func(wfp.PortRange) wfp.Condition, ports []uint16) []wfp.Condition {
	ports = slices.Clone(ports)
	slices.Sort(ports)
	ports = slices.Compact(ports)
	var cs []wfp.Condition
	for _, p := range ports {
		cs = append(cs, mk(wfp.Port(p)))
	}
	return cs
}

// normalize checks env and returns it with apps deduplicated (case-insensitively) and
// sorted, and lists sorted.
func normalize(env Env) (Env, error) {
	var errs []error
	if !isAbsWindows(env.Router) {
		errs = append(errs, fmt.Errorf("router path %q is not absolute", env.Router))
	}
	seen := map[string]bool{}
	var apps []string
	for _, a := range env.CagedApps {
		if !isAbsWindows(a) {
			errs = append(errs, fmt.Errorf("caged app %q is not an absolute path", a))
			continue
		}
		if SystemImage(env.SystemRoot, a) {
			continue
		}
		if k := strings.ToLower(a); !seen[k] {
			seen[k] = true
			apps = append(apps, a)
		}
	}
	slices.SortFunc(apps, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	env.CagedApps = apps
	var svcs []string
	for _, sv := range env.CagedServices {
		if sv == "" || strings.ContainsAny(sv, `\/`) {
			errs = append(errs, fmt.Errorf("caged service %q is not a service name", sv))
			continue
		}
		if k := "svc " + strings.ToLower(sv); !seen[k] {
			seen[k] = true
			svcs = append(svcs, sv)
		}
	}
	slices.SortFunc(svcs, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	env.CagedServices = svcs
	for _, p := range append(append(slices.Clone(env.Listeners), env.DNSPorts...), env.HostPorts...) {
		if p == 0 {
			errs = append(errs, errors.New("port 0 in the listener, DNS or host ports"))
		}
	}
	used := map[uint16]string{}
	for _, p := range env.Listeners {
		used[p] = "listener"
	}
	for _, p := range env.DNSPorts {
		used[p] = "DNS"
	}
	checkListener := func(what string, listen netip.AddrPort, allow []netip.Prefix) {
		if !listen.IsValid() || listen.Port() == 0 {
			errs = append(errs, fmt.Errorf("%s listen address %v is not an address and port", what, listen))
			return
		}
		if other, ok := used[listen.Port()]; ok {
			errs = append(errs, fmt.Errorf("%s %v shares its port with the router's %s", what, listen, other))
		}
		for _, a := range allow {
			if !a.IsValid() {
				errs = append(errs, fmt.Errorf("%s %v: invalid allowed source %v", what, listen, a))
			}
		}
	}
	for _, f := range env.Forwards {
		checkListener("forward", f.Listen, f.Allow)
	}
	for _, in := range env.Inbounds {
		checkListener("inbound", in.Listen, in.Allow)
	}
	for _, s := range env.CageSubnets {
		if !s.IsValid() {
			errs = append(errs, fmt.Errorf("invalid cage subnet %v", s))
		}
	}
	var vms []VMAdapter
	seenLUID := map[uint64]bool{}
	for _, a := range env.VMAdapters {
		a.Subnets = slices.Clone(a.Subnets)
		for i, s := range a.Subnets {
			if !s.IsValid() {
				errs = append(errs, fmt.Errorf("adapter %q: invalid subnet %v", a.Name, s))
			}
			a.Subnets[i] = s.Masked()
		}
		if a.LUID != 0 && seenLUID[a.LUID] {
			continue
		}
		seenLUID[a.LUID] = true
		slices.SortFunc(a.Subnets, netip.Prefix.Compare)
		a.Subnets = slices.Compact(a.Subnets)
		vms = append(vms, a)
	}
	slices.SortFunc(vms, func(a, b VMAdapter) int { return cmp.Or(cmp.Compare(a.LUID, b.LUID), strings.Compare(a.Name, b.Name)) })
	env.VMAdapters = vms
	return env, errors.Join(errs...)
}

func isAbsWindows(p string) bool {
	if strings.HasPrefix(p, `\\`) {
		return len(p) > 2
	}
	return len(p) >= 4 && p[1] == ':' && (p[2] == '\\' || p[2] == '/') && (p[0]|0x20 >= 'a' && p[0]|0x20 <= 'z')
}

// ServiceSID returns the SID Windows gives the service name (NT SERVICE\name): S-1-5-80
// followed by the SHA-1 of the upper-cased name in UTF-16LE, as five little-endian 32-bit
// numbers. A service with SID type "unrestricted" carries it in its token.
func ServiceSID(name string) string {
	u := utf16.Encode([]rune(strings.ToUpper(name)))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	sum := sha1.Sum(b)
	var sb strings.Builder
	sb.WriteString("S-1-5-80")
	for i := 0; i < 5; i++ {
		fmt.Fprintf(&sb, "-%d", binary.LittleEndian.Uint32(sum[4*i:]))
	}
	return sb.String()
}

// String renders the plan, one object per line, for golden files and logs.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "provider %s %q persistent=%v\n", p.Provider.Key, p.Provider.Name, p.Provider.Persistent)
	fmt.Fprintf(&b, "sublayer %s %q weight=%#x persistent=%v\n", p.Sublayer.Key, p.Sublayer.Name, p.Sublayer.Weight, p.Sublayer.Persistent)
	b.WriteString("install:\n")
	for _, f := range p.Persistent {
		fmt.Fprintf(&b, "  %s\n", f.String())
	}
	b.WriteString("arm:\n")
	for _, f := range p.Dynamic {
		fmt.Fprintf(&b, "  %s\n", f.String())
	}
	return b.String()
}
