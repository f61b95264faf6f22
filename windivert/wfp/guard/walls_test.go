package guard

import (
	"net/netip"
	"testing"

	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/wfptest"
)

// The host's services a guest must never reach, and the programs behind them: SMB and
// RDP (what Windows runs), a dev server on 0.0.0.0, a DNS resolver on loopback, VMware's
// authorization service.
const (
	systemExe = "System" // SMB (445) is served by the kernel: the System process
	rdpExe    = `C:\Windows\System32\svchost.exe`
	nodeExe   = `C:\Program Files\nodejs\node.exe`
	resolver  = `C:\Program Files\Acrylic DNS Proxy\AcrylicService.exe`
)

// wallMachine is newMachine with the firewall rules a typical host has: SMB on, Remote
// Desktop on, a dev server someone allowed when Windows asked, DHCP (core networking).
// With them the firewall lets the guests in; what keeps them out is the guard.
func wallMachine() *wfptest.Engine {
	eng := wfptest.New()
	eng.SetHostAddrs(hostLAN, hostOnly, vmnet1Host, vmnet8Host, switchHost, hostLinkLocal)
	fw := eng.WindowsFirewall()
	for _, l := range []wfp.Layer{wfp.LayerAcceptV4, wfp.LayerAcceptV6} {
		fw.Allow("File and Printer Sharing (SMB-In) "+l.String(), l, wfp.Protocol(wfp.ProtoTCP), wfp.LocalPort(wfp.Port(445)))
		fw.Allow("Remote Desktop (TCP-In) "+l.String(), l, wfp.Protocol(wfp.ProtoTCP), wfp.LocalPort(wfp.Port(3389)))
		fw.Allow("node.exe "+l.String(), l, wfp.App(nodeExe))
		fw.Allow("Core Networking DHCP "+l.String(), l, wfp.Protocol(wfp.ProtoUDP), wfp.LocalPort(wfp.Port(67)), wfp.LocalPort(wfp.Port(547)))
	}
	return eng
}

var (
	vmnet1Host    = netip.MustParseAddr("192.168.47.1")
	vmnet8Host    = netip.MustParseAddr("192.168.131.1")
	switchHost    = netip.MustParseAddr("172.30.16.1")
	hostLinkLocal = netip.MustParseAddr("fe80::1c2d:3e4f:5a6b:7c8d")
)

// accept is a connection the host's program app takes on local from remote, arriving on
// the adapter luid (0: not a VM-facing one).
func accept(app string, proto uint8, local, remote string, luid uint64, sids ...string) wfptest.Flow {
	return wfptest.Flow{Dir: wfptest.Inbound, App: app, SIDs: sids, Proto: proto, Local: ap(local), Remote: ap(remote), Interface: luid}
}

func connect(app string, proto uint8, remote string) wfptest.Flow {
	return wfptest.Flow{Dir: wfptest.Outbound, App: app, Proto: proto, Local: ap("192.168.1.10:50000"), Remote: ap(remote)}
}

// wallProbes are the walls' cases for one VM-facing adapter: a guest at guest on the
// adapter luid whose host address is host; forward is the router's forward there (listen
// address and port), from an allowed source.
func wallProbes(guest, host string, luid uint64, forward string) []probe {
	on := func(port string) string {
		return netip.AddrPortFrom(netip.MustParseAddr(host), 0).Addr().String() + ":" + port
	}
	from := guest + ":40000"
	return []probe{
		// A guest to the host's services: refused in every state until cleanup, though the
		// firewall allows each of them.
		{"guest to SMB", accept(systemExe, wfp.ProtoTCP, on("445"), from, luid), B, B, B, P},
		{"guest to RDP", accept(rdpExe, wfp.ProtoTCP, on("3389"), from, luid), B, B, B, P},
		{"guest to a 0.0.0.0 listener", accept(nodeExe, wfp.ProtoTCP, on("8080"), from, luid), B, B, B, P},
		{"guest to a 0.0.0.0 UDP listener", accept(nodeExe, wfp.ProtoUDP, on("5353"), from, luid), B, B, B, P},
		// Through the adapter to the host's LAN address (weak host) or from an address
		// outside the adapter's subnet (a guest picks its own): the interface decides.
		{"guest to the host's LAN address over the adapter", accept(systemExe, wfp.ProtoTCP, netip.AddrPortFrom(hostLAN, 445).String(), from, luid), B, B, B, P},
		{"guest from a foreign source address", accept(nodeExe, wfp.ProtoTCP, on("8080"), "10.99.0.7:40000", luid), B, B, B, P},
		{"guest v6 link-local to SMB", accept(systemExe, wfp.ProtoTCP, "["+hostLinkLocal.String()+"]:445", "[fe80::a00:27ff:fe4e:66a1]:40000", luid), B, B, B, P},
		// What passes: DHCP (but before the filtering engine starts), and the router's
		// forward from its allowed sources while it runs.
		{"guest DHCP to the host's server", accept(rdpExe, wfp.ProtoUDP, "255.255.255.255:67", "0.0.0.0:68", luid), P, B, P, P},
		{"guest to the router's forward", accept(routerExe, wfp.ProtoTCP, forward, from, luid, routerSIDs...), B, B, P, B},
		// The router's transparent listener and DNS port take any source for reflected
		// connections, but never a guest's own.
		{"guest to the router's listener", accept(routerExe, wfp.ProtoTCP, on("47100"), from, luid, routerSIDs...), B, B, B, B},
		{"guest to the router's DNS port", accept(routerExe, wfp.ProtoTCP, on("47153"), from, luid, routerSIDs...), B, B, B, B},
		{"a reflected connection on the uplink", accept(routerExe, wfp.ProtoTCP, netip.AddrPortFrom(hostLAN, 47100).String(), public.String(), 0, routerSIDs...), B, B, P, B},
		// This machine's own connections to its address on the adapter stay untouched
		// (a console to vmware-authd on the VMnet address, a tool to a dev server).
		{"host to its own adapter address (authd 902)", accept(authd, wfp.ProtoTCP, on("902"), on("50123"), luid), P, P, P, P},
		{"host to its own adapter address (dev server)", accept(nodeExe, wfp.ProtoTCP, on("8080"), on("50124"), luid), P, P, P, P},
	}
}

// loopbackProbes are the hypervisors' own loopback use and the host's, which no wall may
// break, and a caged app's reach of link-local addresses.
func loopbackProbes() []probe {
	return []probe{
		{"authd takes vmware-vmx on 127.0.0.1:902", accept(authd, wfp.ProtoTCP, "127.0.0.1:902", "127.0.0.1:50200", 0), P, P, P, P},
		{"authd takes the console on 127.0.0.1:912", accept(authd, wfp.ProtoTCP, "127.0.0.1:912", "127.0.0.1:50201", 0), P, P, P, P},
		{"vmware-vmx to authd 127.0.0.1:902", connect(vmwareVMX, wfp.ProtoTCP, "127.0.0.1:902"), P, B, P, P},
		{"vmware-vmx to authd 127.0.0.1:912", connect(vmwareVMX, wfp.ProtoTCP, "127.0.0.1:912"), P, B, P, P},
		// vmnat.exe carries the guests' NAT: authd is a host service like any other to it.
		{"vmnat to 127.0.0.1:902", connect(vmnat, wfp.ProtoTCP, "127.0.0.1:902"), B, B, B, P},
		{"a loopback resolver takes a query from 127.0.0.1", accept(resolver, wfp.ProtoUDP, "127.0.0.1:53", "127.0.0.1:50300", 0), P, P, P, P},
		// A NAT process's DNS to the loopback resolver is the guest's DNS reaching a host
		// service (and leaking the guest's names past the router): refused like the rest.
		{"vmnat's DNS to a loopback resolver", connect(vmnat, wfp.ProtoUDP, "127.0.0.1:53"), B, B, B, P},
		{"vmnat to 169.254.169.254:80 (metadata)", connect(vmnat, wfp.ProtoTCP, "169.254.169.254:80"), B, B, B, P},
		{"vmnat to 169.254.169.254:80/udp", connect(vmnat, wfp.ProtoUDP, "169.254.169.254:80"), B, B, B, P},
		{"vmware-vmx to 169.254.169.254:80", connect(vmwareVMX, wfp.ProtoTCP, "169.254.169.254:80"), B, B, B, P},
		{"vmnat to [fe80::1]:80", connect(vmnat, wfp.ProtoTCP, "[fe80::1]:80"), B, B, B, P},
		{"vmnat to a public 443", connect(vmnat, wfp.ProtoTCP, public.String()), B, B, P, P},
		{"chrome to 169.254.169.254:80 (the host's own)", connect(chrome, wfp.ProtoTCP, "169.254.169.254:80"), P, P, P, P},
		{"chrome to a LAN neighbour's link-local", connect(chrome, wfp.ProtoTCP, "[fe80::2]:445"), P, P, P, P},
	}
}

// walk installs plan on a wall machine and classifies ps in each state: installed,
// rebooted before and after the filtering engine starts, armed, crashed, stopped, removed.
func walk(t *testing.T, plan Plan, ps []probe) {
	t.Helper()
	eng := wallMachine()
	inst := eng.Process("router service install")
	if _, err := New(inst, nil).Install(plan); err != nil {
		t.Fatal(err)
	}
	inst.Exit()
	expect(t, eng, "installed", ps, installed)
	eng.Reboot()
	expect(t, eng, "boot, before the BFE", ps, boot)
	eng.Boot()
	expect(t, eng, "booted, not started", ps, installed)
	svc := eng.Process("router service")
	g := New(svc, nil)
	if _, err := g.Install(plan); err != nil {
		t.Fatal(err)
	}
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	expect(t, eng, "running", ps, armed)
	svc.Exit()
	expect(t, eng, "crashed", ps, installed)
	svc = eng.Process("router service, restarted")
	g = New(svc, nil)
	if _, err := g.Install(plan); err != nil {
		t.Fatal(err)
	}
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	if err := g.Disarm(); err != nil {
		t.Fatal(err)
	}
	svc.Exit()
	expect(t, eng, "stopped", ps, installed)
	if _, err := New(eng.Process("router cleanup"), nil).Remove(); err != nil {
		t.Fatal(err)
	}
	expect(t, eng, "removed", ps, removed)
}

// TestWalls: a guest on a VM-facing adapter (VirtualBox host-only, VMware's VMnet1 and
// VMnet8, a Hyper-V internal switch of cage_subnets) reaches no service of this machine
// but the router's forward and DHCP, in every state; this machine's own connections, the
// hypervisors' loopback use included, are untouched; the caged apps reach no link-local
// address.
func TestWalls(t *testing.T) {
	t.Run("virtualbox host-only", func(t *testing.T) {
		walk(t, mustPlan(t, baseEnv()), wallProbes("192.168.56.101", "192.168.56.1", luidVBox, "192.168.56.1:47831"))
	})
	t.Run("vmware", func(t *testing.T) {
		env := baseEnv()
		env.CagedApps = []string{vmwareVMX, vmnat}
		env.Forwards[0].Listen = netip.MustParseAddrPort("192.168.131.1:47831")
		env.Forwards[0].Allow = []netip.Prefix{netip.MustParsePrefix("192.168.131.0/24")}
		env.VMAdapters = vmwareAdapters()
		ps := wallProbes("192.168.131.128", "192.168.131.1", luidVMnet8, "192.168.131.1:47831")
		// VMnet1 (host-only) has no forward: the guest reaches nothing there but DHCP.
		for _, p := range wallProbes("192.168.47.128", "192.168.47.1", luidVMnet1, "192.168.47.1:47831") {
			if p.name == "guest to the router's forward" {
				p.armed = B
			}
			p.name = "vmnet1: " + p.name
			ps = append(ps, p)
		}
		walk(t, mustPlan(t, env), append(ps, loopbackProbes()...))
	})
	t.Run("hyper-v internal switch", func(t *testing.T) {
		env := baseEnv()
		env.CageSubnets = []netip.Prefix{netip.MustParsePrefix("172.30.16.0/20")}
		env.VMAdapters = append(env.VMAdapters, VMAdapter{Name: "vEthernet (agent)", LUID: luidSwitch, Subnets: env.CageSubnets})
		env.Inbounds = []Inbound{{Listen: netip.MustParseAddrPort("172.30.16.1:1080"), Allow: env.CageSubnets}}
		walk(t, mustPlan(t, env), wallProbes("172.30.16.5", "172.30.16.1", luidSwitch, "172.30.16.1:1080"))
	})
	// A cage subnet whose adapter the router could not list: the subnet alone walls it
	// (a guest that picks a foreign source address is then not caught).
	t.Run("cage subnet, adapter unknown", func(t *testing.T) {
		env := baseEnv()
		env.VMAdapters = nil
		env.CageSubnets = []netip.Prefix{netip.MustParsePrefix("172.30.16.0/20")}
		ps := wallProbes("172.30.16.5", "172.30.16.1", 0, "172.30.16.1:47831")
		var kept []probe
		for _, p := range ps {
			switch p.name {
			case "guest from a foreign source address", "guest v6 link-local to SMB":
				continue // only the interface tells these
			case "guest to the router's forward":
				p.armed = B // the forward allows 192.168.56.0/24 only
			}
			kept = append(kept, p)
		}
		walk(t, mustPlan(t, env), kept)
	})
}

// TestWallsLeaveOtherNetworksAlone: a LAN client reaches the host's SMB as the firewall
// allows; the guard walls the VM-facing adapters only.
func TestWallsLeaveOtherNetworksAlone(t *testing.T) {
	walk(t, mustPlan(t, baseEnv()), []probe{
		{"LAN client to SMB", accept(systemExe, wfp.ProtoTCP, netip.AddrPortFrom(hostLAN, 445).String(), "192.168.1.20:40000", 0), P, B, P, P},
		{"LAN client to a port nobody allowed", accept(systemExe, wfp.ProtoTCP, netip.AddrPortFrom(hostLAN, 5432).String(), "192.168.1.20:40000", 0), B, B, B, B},
	})
}
