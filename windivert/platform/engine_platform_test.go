package platform

import (
	"errors"
	"io/fs"
	"log/slog"
	"net/netip"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/router/capture/capturetest"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/adapters"
	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/guard"
	"github.com/agentcage/router/windivert/wfp/wfptest"
	"github.com/agentcage/router/windivert/windiverttest"
)

// machine is a Windows machine for the guard's app lookup: VirtualBox installed.
type machine struct{}

func (machine) RegString(key, value string) (string, error) {
	if strings.EqualFold(key, `SOFTWARE\Oracle\VirtualBox`) && value == "InstallDir" {
		return `C:\Program Files\Oracle\VirtualBox\`, nil
	}
	return "", fs.ErrNotExist
}

func (machine) ReadDir(dir string) ([]string, error) {
	if strings.EqualFold(strings.TrimSuffix(dir, `\`), `C:\Program Files\Oracle\VirtualBox`) {
		return []string{"VirtualBoxVM.exe", "VBoxHeadless.exe", "VBoxNetNAT.exe", "VBoxSVC.exe"}, nil
	}
	return nil, fs.ErrNotExist
}

func (m machine) Exists(path string) bool {
	i := strings.LastIndex(path, `\`)
	files, err := m.ReadDir(path[:i])
	if err != nil {
		return false
	}
	for _, f := range files {
		if strings.EqualFold(f, path[i+1:]) {
			return true
		}
	}
	return false
}

func (machine) Getenv(name string) string {
	if name == "ProgramFiles" {
		return `C:\Program Files`
	}
	return ""
}

// everywhere is a machine with every known hypervisor's images installed: the guard names
// each caged image.
type everywhere struct{ machine }

func (everywhere) ReadDir(dir string) ([]string, error) {
	return []string{"VirtualBoxVM.exe", "VBoxHeadless.exe", "VBoxNetNAT.exe", "vmnat.exe", "vmware-vmx.exe", "qemu-system-x86_64.exe"}, nil
}

func (e everywhere) Exists(path string) bool { return true }

var errDriverGone = errors.New("the driver is gone")

// windowsScene is the Windows platform with a fake WinDivert and filtering engine.
type windowsScene struct {
	drv *windiverttest.Driver
	wfp *wfptest.Engine
	p   *redirectPlatform
}

func newWindowsScene(t *testing.T) *windowsScene {
	s := &windowsScene{drv: windiverttest.NewDriver(), wfp: wfptest.New()}
	s.p = newRedirectPlatform(slog.New(slog.DiscardHandler), sceneDeps(s.drv, s.wfp))
	return s
}

// sceneDeps are a scene's collaborators: drv as WinDivert (loaded at once, unloaded
// without fault), eng as the filtering engine, a machine without hypervisors, and the
// router installed as the service "router", its own PID 100.
func sceneDeps(drv *windiverttest.Driver, eng wfp.Engine) engineDeps {
	return engineDeps{
		LoadDriver: func() (windivert.Driver, func() error, error) { return drv, func() error { return nil }, nil },
		WFP:        eng,
		Machine:    machine{},
		Router:     `C:\Program Files\router\router.exe`,
		Service:    "router",
		OwnPID:     100,
	}
}

// dynamic counts the guard's permits that live with the process (the dynamic session).
func (s *windowsScene) dynamic() int {
	n := 0
	for _, f := range s.wfp.Filters() {
		if f.Lifetime == wfptest.Dynamic {
			n++
		}
	}
	return n
}

func (s *windowsScene) persistent() int {
	n := 0
	for _, f := range s.wfp.Filters() {
		if f.Lifetime != wfptest.Dynamic {
			n++
		}
	}
	return n
}

func (s *windowsScene) openHandles() int { return len(s.drv.OpenHandles()) }

// failCapture makes the engine's reads fail, as a driver error or another tool removing
// WinDivert does.
func (s *windowsScene) failCapture(t *testing.T) {
	t.Helper()
	for _, h := range s.drv.OpenHandles() {
		if h.Layer == windivert.LayerNetwork && h.Flags == 0 {
			h.Fail(errDriverGone)
			return
		}
	}
	t.Fatal("no diverting NETWORK handle is open")
}

// TestWindowsPlatformFailsClosed: the capture's read error drops the guard's permits, closes
// WinDivert and is reported; the persistent blocks stay.
func TestWindowsPlatformFailsClosed(t *testing.T) {
	s := newWindowsScene(t)
	cfg := capturetest.Parse(t, capturetest.Base)
	if err := s.p.Install(cfg, policy.New(cfg, s.p.Env()), nil); err != nil {
		t.Fatal(err)
	}
	if s.dynamic() == 0 || s.persistent() == 0 || s.openHandles() != 3 {
		t.Fatalf("after Install: %d permits, %d blocks, %d handles; want armed, guarded, capturing", s.dynamic(), s.persistent(), s.openHandles())
	}
	s.failCapture(t)
	select {
	case err := <-s.p.Failed():
		if !errors.Is(err, errDriverGone) {
			t.Errorf("failure %v, want the read error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the read error was not reported")
	}
	if s.dynamic() != 0 || s.persistent() == 0 || s.openHandles() != 0 {
		t.Errorf("after the failure: %d permits, %d blocks, %d handles; want 0 permits, the blocks, 0 handles", s.dynamic(), s.persistent(), s.openHandles())
	}
	if err := s.p.Close(); err != nil {
		t.Errorf("Close after the failure: %v", err)
	}
}

// TestGuardPlanCageSubnets: a Hyper-V internal switch's subnet in [capture] cage_subnets
// reaches the guard, and nothing from it is forwarded in any state: installed, at boot,
// while the router runs, after a crash; another subnet is not the guard's business.
func TestGuardPlanCageSubnets(t *testing.T) {
	cfg := capturetest.ParseWindows(t, `
[capture]
hypervisors = ["hyperv"]
cage_subnets = ["192.168.200.0/24", "fd00:c0de::/64"]
[[forward]]
listen = "192.168.200.1:47831"
connect = "127.0.0.1:47831"
allow = ["192.168.200.0/24"]
`)
	if !slices.Contains(cfg.Capture.VMNetworks, netip.MustParsePrefix("192.168.200.0/24")) {
		t.Errorf("VM networks %v lack the cage subnet", cfg.Capture.VMNetworks)
	}
	plan, _, err := GuardPlan(cfg, machine{}, nil, `C:\Program Files\router\router.exe`, "router")
	if err != nil {
		t.Fatal(err)
	}
	eng := wfptest.New()
	eng.WindowsFirewall()
	ap := netip.MustParseAddrPort
	caged := []wfptest.Flow{
		{Dir: wfptest.Forwarded, Proto: wfp.ProtoTCP, Local: ap("192.168.200.10:40000"), Remote: ap("203.0.113.10:443")},
		{Dir: wfptest.Forwarded, Proto: wfp.ProtoUDP, Local: ap("192.168.200.10:40000"), Remote: ap("8.8.8.8:53")},
		{Dir: wfptest.Forwarded, Proto: wfp.ProtoICMP, Local: ap("192.168.200.10:0"), Remote: ap("8.8.8.8:0")},
		{Dir: wfptest.Forwarded, Proto: wfp.ProtoTCP, Local: ap("[fd00:c0de::10]:40000"), Remote: ap("[2001:db8::1]:443")},
	}
	other := wfptest.Flow{Dir: wfptest.Forwarded, Proto: wfp.ProtoTCP, Local: ap("172.30.16.5:40000"), Remote: ap("203.0.113.10:443")}
	check := func(state string) {
		t.Helper()
		for _, f := range caged {
			if v := eng.Classify(f); v.Action != wfp.Block {
				t.Errorf("%s: %v: %v, want block", state, f, v)
			}
		}
		if v := eng.Classify(other); v.Action != wfp.Permit {
			t.Errorf("%s: %v: %v, want permit (not a cage subnet)", state, other, v)
		}
	}
	if v := eng.Classify(caged[0]); v.Action != wfp.Permit {
		t.Fatalf("before the guard: %v; the fake engine should forward by default", v)
	}
	// install installs the plan as a new process of the given name.
	install := func(name string) (*wfptest.Process, *guard.Guard) {
		t.Helper()
		p := eng.Process(name)
		g := guard.New(p, nil)
		if _, err := g.Install(plan); err != nil {
			t.Fatal(err)
		}
		return p, g
	}
	p, _ := install("router service install")
	p.Exit()
	check("installed")
	eng.Reboot()
	check("boot")
	eng.Boot()
	check("booted")
	p, g := install("router")
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	check("armed")
	p.Exit()
	check("crashed")
}

// fakePorts is a reservation in memory: it records the networks of the sockets it served.
type fakePorts struct {
	mu   sync.Mutex
	nets []string
}

func (f *fakePorts) Ranges() []windivert.PortRange {
	return []windivert.PortRange{{Lo: 61000, Hi: 61999}, {Lo: 62000, Hi: 62099}}
}

func (f *fakePorts) Reserve(network string, _ syscall.RawConn) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nets = append(f.nets, network)
	return nil
}

// TestOwnPortsAndServers: the router's reserved source ports and the forwards' listen
// addresses are out of the capture's filters, and only sockets that dial out of this
// machine take a reserved port (a listener binds its own, a dial to this machine is never
// captured).
func TestOwnPortsAndServers(t *testing.T) {
	s := newWindowsScene(t)
	fp := &fakePorts{}
	s.p.deps.ReservePorts = func() (OwnPorts, error) { return fp, nil }
	s.p.host.List = func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("192.168.56.1")}, nil }
	ctl := s.p.Control(0)
	if ctl == nil {
		t.Fatal("no Control with reserved ports")
	}
	for _, c := range []struct {
		network, address string
		reserved         bool
	}{
		{"tcp4", "198.51.100.1:1080", true},      // the proxy
		{"udp4", "1.1.1.1:53", true},             // a DNS upstream
		{"tcp6", "[2001:db8::1]:443", true},      // a direct dial
		{"tcp", "[::]:47100", false},             // the transparent listener
		{"tcp4", "192.168.56.1:47831", false},    // a forward's listener
		{"tcp4", "127.0.0.1:47831", false},       // the forward's target on loopback
		{"udp", "127.0.0.1:47153", false},        // the DNS socket
		{"tcp4", "192.168.56.1:8080", false},     // this machine
		{"tcp4", "[::ffff:127.0.0.1]:80", false}, // mapped loopback
	} {
		before := len(fp.nets)
		if err := ctl(c.network, c.address, nil); err != nil {
			t.Fatal(err)
		}
		if got := len(fp.nets) > before; got != c.reserved {
			t.Errorf("%s %s: reserved %v, want %v", c.network, c.address, got, c.reserved)
		}
	}
	cfg := capturetest.Parse(t, capturetest.Base)
	ex := s.p.exclusions(cfg, literalUpstreams(cfg))
	f := ex.Filter().String()
	for _, want := range []string{"localPort < 61000 or localPort > 61999", "localPort < 62000 or localPort > 62099", "!tcp or localPort != 47831 or localAddr != 10.0.2.2", "198.51.100.1"} {
		if !strings.Contains(f, want) {
			t.Errorf("exclusions %q lack %q", f, want)
		}
	}
}

// TestUDPScope: with local = false and every caged app an executable the guard names, the
// capture takes UDP only to DNS and the caged direct rules' ports (and the guard refuses the
// caged apps' other UDP); with local = true, a caged service or a direct rule for caged
// flows without ports, all of it. A reload that would need more UDP than the running filter
// takes is refused.
func TestUDPScope(t *testing.T) {
	// windowsCfg with a direct rule for the caged hypervisor's TURN ports (UDP), before the cage.
	const turn = "[[rule]]\nname = \"turn\"\napps = [\"VirtualBoxVM.exe\"]\nports = [\"3478-3479\"]\nnetwork = \"udp\"\naction = \"direct\"\n"
	narrowCfg := strings.Replace(windowsCfg, "[[rule]]\nname = \"cage\"", turn+"[[rule]]\nname = \"cage\"", 1)
	for _, tc := range []struct {
		name, text string
		narrow     bool
		filter     string // in the NETWORK filter
		m          guard.Machine
	}{
		{"narrow", narrowCfg, true, "udp.DstPort >= 3478 and udp.DstPort <= 3479", everywhere{}},
		{"a known hypervisor the guard cannot name", narrowCfg, false, "", machine{}},
		{"local", strings.Replace(narrowCfg, "hypervisors", "local = true\nhypervisors", 1), false, "", everywhere{}},
		{"caged service", narrowCfg + "[[rule]]\nname = \"nat\"\nservices = [\"SharedAccess\"]\naction = \"block\"\n", false, "", everywhere{}},
		{"direct without ports", strings.Replace(narrowCfg, `ports = ["3478-3479"]`, `hosts = ["203.0.113.0/24"]`, 1), false, "", everywhere{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newWindowsScene(t)
			s.p.deps.Machine = tc.m
			cfg := capturetest.ParseWindows(t, tc.text)
			if err := s.p.Install(cfg, policy.New(cfg, s.p.Env()), nil); err != nil {
				t.Fatal(err)
			}
			defer s.p.Close()
			var nf string
			for _, h := range s.drv.OpenHandles() {
				if h.Layer == windivert.LayerNetwork && h.Flags == 0 {
					nf = h.Filter
				}
			}
			if narrow := s.p.udp != nil; narrow != tc.narrow || !strings.Contains(nf, tc.filter) {
				t.Fatalf("narrow %v (ports %v), want %v; filter %s", narrow, s.p.udp, tc.narrow, nf)
			}
			if !tc.narrow {
				return
			}
			if !strings.Contains(nf, "udp.DstPort == 53") {
				t.Errorf("DNS not in the filter: %s", nf)
			}
			wider := capturetest.ParseWindows(t, strings.Replace(tc.text, `ports = ["3478-3479"]`, `ports = ["3478-3480"]`, 1))
			if err := s.p.Install(wider, policy.New(wider, s.p.Env()), nil); err == nil || !strings.Contains(err.Error(), "restart") {
				t.Errorf("reload needing UDP to 3480: %v, want refused until a restart", err)
			}
			if err := s.p.Install(cfg, policy.New(cfg, s.p.Env()), nil); err != nil {
				t.Errorf("reload of the same config: %v", err)
			}
		})
	}
}

// TestGuardPlanWalls: the guard walls the host from the VirtualBox and VMware adapters and
// from a Hyper-V switch of cage_subnets, not from the Default Switch, WSL or another switch
// (Windows NATs those in the kernel: their guests are uncaged anyway and their DNS is a
// host service on the adapter).
func TestGuardPlanWalls(t *testing.T) {
	cfg := capturetest.ParseWindows(t, `
[capture]
hypervisors = ["virtualbox", "hyperv"]
cage_subnets = ["192.168.200.0/24"]
`)
	pfx := netip.MustParsePrefix
	vms := []adapters.Adapter{
		{Interface: adapters.Interface{Name: "VirtualBox Host-Only Ethernet Adapter", LUID: 1}, Kind: adapters.KindVirtualBox, Subnets: []netip.Prefix{pfx("192.168.56.0/24")}},
		{Interface: adapters.Interface{Name: "VMware Network Adapter VMnet8", LUID: 2}, Kind: adapters.KindVMware, Subnets: []netip.Prefix{pfx("192.168.131.0/24")}},
		{Interface: adapters.Interface{Name: "vEthernet (agent)", LUID: 3}, Kind: adapters.KindHyperV, Subnets: []netip.Prefix{pfx("192.168.200.0/24")}},
		{Interface: adapters.Interface{Name: "vEthernet (lab)", LUID: 4}, Kind: adapters.KindHyperV, Subnets: []netip.Prefix{pfx("10.77.0.0/24")}},
		{Interface: adapters.Interface{Name: "vEthernet (Default Switch)", LUID: 5}, Kind: adapters.KindDefaultSwitch, Subnets: []netip.Prefix{pfx("172.20.0.0/20")}},
		{Interface: adapters.Interface{Name: "vEthernet (WSL)", LUID: 6}, Kind: adapters.KindWSL, Subnets: []netip.Prefix{pfx("172.29.0.0/20")}},
	}
	plan, _, err := GuardPlan(cfg, machine{}, vms, `C:\Program Files\router\router.exe`, "router")
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, a := range plan.Env.VMAdapters {
		got = append(got, a.LUID)
	}
	if want := []uint64{1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("walled adapters %v, want %v", got, want)
	}
	eng := wfptest.New()
	eng.WindowsFirewall().Allow("SMB", wfp.LayerAcceptV4, wfp.LocalPort(wfp.Port(445)))
	if _, err := guard.New(eng, nil).Install(plan); err != nil {
		t.Fatal(err)
	}
	smb := func(luid uint64, guest string) wfptest.Flow {
		return wfptest.Flow{Dir: wfptest.Inbound, App: "System", Proto: wfp.ProtoTCP, Local: netip.MustParseAddrPort("192.168.1.10:445"), Remote: netip.MustParseAddrPort(guest + ":40000"), Interface: luid}
	}
	for _, c := range []struct {
		f    wfptest.Flow
		want wfp.Action
	}{
		{smb(1, "192.168.56.101"), wfp.Block},
		{smb(2, "192.168.131.128"), wfp.Block},
		{smb(3, "192.168.200.10"), wfp.Block},
		{smb(4, "10.77.0.5"), wfp.Permit},
		{smb(5, "172.20.0.5"), wfp.Permit},
		{smb(0, "192.168.1.20"), wfp.Permit},
	} {
		if v := eng.Classify(c.f); v.Action != c.want {
			t.Errorf("%v: %v, want %v", c.f, v, c.want)
		}
	}
}

// TestGuardPlanCagesTheSet: the guard's plan blocks the caged-app set policytest names (the
// ones this machine has an executable for; the others are returned unresolved) and the
// known hypervisors' images, nothing else; a caged service keeps the UDP scope wide.
func TestGuardPlanCagesTheSet(t *testing.T) {
	cfg := capturetest.ParseWindows(t, policytest.CagedConfig)
	plan, unresolved, err := GuardPlan(cfg, machine{}, nil, `C:\Program Files\router\router.exe`, "router")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range plan.Env.CagedApps {
		got = append(got, path.Base(strings.ReplaceAll(p, `\`, "/")))
	}
	got = append(got, unresolved...)
	want := slices.Clone(policytest.CagedNames)
	for _, a := range KnownHypervisorApps("windows") {
		want = append(want, a.String())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(slices.Compact(got), slices.Compact(want)) {
		t.Errorf("guard cages %q, want %q", got, want)
	}
	if _, narrow := udpScope(cfg, unresolved); narrow {
		t.Error("UDP scope narrow with a caged service")
	}
}
