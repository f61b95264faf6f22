package guard

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcage/router/windivert/wfp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const (
	vboxVM       = `C:\Program Files\Oracle\VirtualBox\VirtualBoxVM.exe`
	vboxHeadless = `C:\Program Files\Oracle\VirtualBox\VBoxHeadless.exe`
	vboxNetNAT   = `C:\Program Files\Oracle\VirtualBox\VBoxNetNAT.exe`
	qemu         = `C:\Program Files\qemu\qemu-system-x86_64.exe`
	routerExe    = `C:\Program Files\router\router.exe`
	chrome       = `C:\Program Files\Google\Chrome\Application\chrome.exe`
	svchost      = `C:\Windows\System32\svchost.exe`
	vmwareVMX    = `C:\Program Files (x86)\VMware\VMware Workstation\x64\vmware-vmx.exe`
	vmnat        = `C:\Windows\SysWOW64\vmnat.exe`
	authd        = `C:\Program Files (x86)\VMware\VMware Workstation\vmware-authd.exe`
)

// The LUIDs of the test machine's VM-facing adapters.
const (
	luidVBox   uint64 = 0x0006_0000_0100_0000
	luidVMnet1 uint64 = 0x0006_0000_0200_0000
	luidVMnet8 uint64 = 0x0006_0000_0300_0000
	luidSwitch uint64 = 0x0006_0000_0400_0000
)

func vboxAdapter() VMAdapter {
	return VMAdapter{Name: "VirtualBox Host-Only Ethernet Adapter", LUID: luidVBox, Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.56.0/24")}}
}

func vmwareAdapters() []VMAdapter {
	return []VMAdapter{
		{Name: "VMware Network Adapter VMnet8", LUID: luidVMnet8, Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.131.0/24")}},
		{Name: "VMware Network Adapter VMnet1", LUID: luidVMnet1, Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.47.0/24")}},
	}
}

// baseEnv is the README's worked example: VirtualBox, the model forwarded to the host-only network.
func baseEnv() Env {
	return Env{
		VMAdapters: []VMAdapter{vboxAdapter()},
		CagedApps:  []string{vboxVM, vboxHeadless, vboxNetNAT, strings.ToUpper(vboxVM)},
		Router:     routerExe,
		Service:    "router",
		Listeners:  []uint16{47100},
		DNSPorts:   []uint16{47153},
		Forwards: []Forward{{
			Listen:  netip.MustParseAddrPort("192.168.56.1:47831"),
			Connect: netip.MustParseAddrPort("127.0.0.1:47831"),
			Allow:   []netip.Prefix{netip.MustParsePrefix("192.168.56.0/24")},
		}},
	}
}

func TestPlanGolden(t *testing.T) {
	cases := map[string]func(*Env){
		"service":    func(*Env) {},
		"local":      func(e *Env) { e.DNSAll = true },
		"foreground": func(e *Env) { e.Service = "" },
		"hyperv": func(e *Env) {
			e.VMAdapters = append(e.VMAdapters, VMAdapter{Name: "vEthernet (agent)", LUID: luidSwitch, Subnets: []netip.Prefix{netip.MustParsePrefix("172.30.16.0/20")}})
			e.CageSubnets = []netip.Prefix{netip.MustParsePrefix("172.30.16.0/20"), netip.MustParsePrefix("fd00:cafe::/64")}
			e.Forwards[0].Allow = append(e.Forwards[0].Allow, netip.MustParsePrefix("fd00:cafe::/64"))
		},
		"noapps": func(e *Env) { e.CagedApps = nil; e.Forwards = nil },
		// VMware NAT with the host-only adapter VMnet1 and the NAT one VMnet8: the walls on
		// both adapters, authd's ports open to vmware-vmx.exe only.
		"vmware": func(e *Env) {
			e.CagedApps = []string{vmwareVMX, vmnat}
			e.Forwards[0].Listen = netip.MustParseAddrPort("192.168.131.1:47831")
			e.Forwards[0].Allow = []netip.Prefix{netip.MustParsePrefix("192.168.131.0/24")}
			e.VMAdapters = vmwareAdapters()
		},
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			env := baseEnv()
			mod(&env)
			p, err := NewPlan(env)
			if err != nil {
				t.Fatal(err)
			}
			got := p.String()
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("plan differs from %s (go test -update rewrites it):\n%s", path, got)
			}
			for _, f := range append(p.Persistent, p.Dynamic...) {
				if err := f.Validate(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestPlanDeterministic: the same environment in another order gives the same plan, and
// keys are unique.
func TestPlanDeterministic(t *testing.T) {
	a := baseEnv()
	b := baseEnv()
	b.CagedApps = []string{vboxNetNAT, vboxHeadless, vboxVM}
	pa, err := NewPlan(a)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := NewPlan(b)
	if err != nil {
		t.Fatal(err)
	}
	if pa.String() != pb.String() {
		t.Errorf("plans differ:\n%s\n%s", pa, pb)
	}
	keys := map[wfp.Key]string{}
	for _, f := range append(pa.Persistent, pa.Dynamic...) {
		if other, ok := keys[f.Key]; ok {
			t.Errorf("key %v of %q also used by %q", f.Key, f.Name, other)
		}
		keys[f.Key] = f.Name
	}
}

func TestPlanRejects(t *testing.T) {
	for name, mod := range map[string]func(*Env){
		"relative router":  func(e *Env) { e.Router = "router.exe" },
		"relative app":     func(e *Env) { e.CagedApps = append(e.CagedApps, "VirtualBoxVM.exe") },
		"port 0":           func(e *Env) { e.DNSPorts = []uint16{0} },
		"forward on dns":   func(e *Env) { e.Forwards[0].Listen = netip.MustParseAddrPort("192.168.56.1:47153") },
		"forward no port":  func(e *Env) { e.Forwards[0].Listen = netip.AddrPort{} },
		"bad cage subnet":  func(e *Env) { e.CageSubnets = []netip.Prefix{{}} },
		"bad allow prefix": func(e *Env) { e.Forwards[0].Allow = []netip.Prefix{{}} },
		"bad adapter":      func(e *Env) { e.VMAdapters[0].Subnets = []netip.Prefix{{}} },
	} {
		env := baseEnv()
		mod(&env)
		if _, err := NewPlan(env); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestServiceSID(t *testing.T) {
	// The well-known SID of NT SERVICE\TrustedInstaller.
	if got, want := ServiceSID("TrustedInstaller"), "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if ServiceSID("router") != ServiceSID("ROUTER") {
		t.Error("service SID depends on case")
	}
}
