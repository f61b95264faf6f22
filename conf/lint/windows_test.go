package lint

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/windivert/adapters"
	"github.com/agentcage/router/windivert/adapters/adapterstest"
)

func TestWindowsFacts(t *testing.T) {
	on := true
	defSwitch, wsl := adapterstest.DefaultSwitch(), adapterstest.WSL()
	internal := adapters.Adapter{Interface: adapters.Interface{Name: "vEthernet (AgentCage)", Forwarding: new(bool)}, Kind: adapters.KindHyperV, NAT: adapters.NATNone,
		Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.200.0/24")}}
	routed := internal
	routed.Forwarding = &on
	base := "[proxy.exit]\naddress = \"192.0.2.1:1080\"\n[capture]\nhypervisors = [\"virtualbox\"]\ncage_subnets = [\"192.168.200.0/24\"]\n[[rule]]\nname = \"cage\"\ncaged = true\naction = \"proxy\"\n"
	for _, tc := range []struct {
		name  string
		text  string
		facts WindowsFacts
		want  []string
	}{
		{"default switch and wsl", base, WindowsFacts{Adapters: []adapters.Adapter{defSwitch, wsl, internal}}, []string{CheckUncagedSwitch, CheckUncagedSwitch}},
		{"internal switch forwarding", base, WindowsFacts{Adapters: []adapters.Adapter{routed}}, nil}, // its subnet is a cage subnet: the guard blocks forwarding
		{"internal switch forwarding, not caged", "[capture]\nhypervisors = [\"virtualbox\"]\n", WindowsFacts{Adapters: []adapters.Adapter{routed}}, []string{CheckUncagedSwitch}},
		{"host resolver, caged scope", base, WindowsFacts{HostResolverVMs: []string{"agent"}}, []string{CheckHostResolver}},
		{"host resolver, all", base + "[dns]\ncapture = \"all\"\n", WindowsFacts{HostResolverVMs: []string{"agent"}}, nil},
		{"host resolver, Dnscache caged", base + "[[rule]]\nname = \"dns\"\nservices = [\"Dnscache\"]\naction = \"proxy\"\n", WindowsFacts{HostResolverVMs: []string{"agent"}}, nil},
		{"wsl closed by the Hyper-V firewall", base, WindowsFacts{Adapters: []adapters.Adapter{wsl}, WSL: adapterstest.ClosedWSL()}, nil},
		{"host-only with ICS", base, WindowsFacts{Adapters: []adapters.Adapter{adapterstest.HostOnlyICS()}}, []string{CheckUncagedSwitch}},
		{"default switch accepted", strings.Replace(base, "[capture]\n", "[capture]\nuncaged_adapters = \"accept\"\n", 1), WindowsFacts{Adapters: []adapters.Adapter{defSwitch}}, []string{CheckUncagedSwitch}},
		{"external switch", base, WindowsFacts{Adapters: []adapters.Adapter{{Interface: adapters.Interface{Name: "vEthernet (LAN)", Forwarding: new(bool), Gateway: true}, Kind: adapters.KindHyperV, NAT: adapters.NATNone,
			Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")}}}}, []string{CheckBridged}},
		// Whether the config names an External switch's guests as caged is the adapters'
		// decision (Adapter.Covered), asked, not made again here.
		{"external switch in cage_subnets", base, WindowsFacts{Adapters: []adapters.Adapter{{Interface: adapters.Interface{Name: "vEthernet (LAN)", Forwarding: new(bool), Gateway: true}, Kind: adapters.KindHyperV, NAT: adapters.NATNone,
			Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.200.0/25")}}}}, nil},
		{"external switch half in cage_subnets", base, WindowsFacts{Adapters: []adapters.Adapter{{Interface: adapters.Interface{Name: "vEthernet (LAN)", Forwarding: new(bool), Gateway: true}, Kind: adapters.KindHyperV, NAT: adapters.NATNone,
			Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.200.0/24"), netip.MustParsePrefix("192.168.1.0/24")}}}}, []string{CheckBridged}},
		{"external switch without an address", base, WindowsFacts{Adapters: []adapters.Adapter{{Interface: adapters.Interface{Name: "vEthernet (LAN)", Forwarding: new(bool), Gateway: true}, Kind: adapters.KindHyperV, NAT: adapters.NATNone}}}, []string{CheckBridged}},
		{"wsl mirrored", base, WindowsFacts{WSL: adapters.WSL{Mode: "mirrored"}}, []string{CheckUncagedSwitch}},
		{"bridged VM", base, WindowsFacts{Bridged: []adapters.Bridged{{Hypervisor: "vmware", VM: "lan", Slot: "ethernet0"}}}, []string{CheckBridged}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := conf.Parse("w.toml", []byte(tc.text), conf.Options{SkipSecrets: true, OS: "windows"})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range Check(cfg, Host{OS: "windows", Windows: tc.facts}) {
				if f.Check == CheckUncagedSwitch || f.Check == CheckHostResolver || f.Check == CheckBridged {
					got = append(got, f.Check)
					want := Warning
					if f.Check == CheckUncagedSwitch && !strings.Contains(tc.text, "uncaged_adapters") {
						want = Error // the start refuses it
					}
					if f.Severity != want || f.Fix == "" {
						t.Errorf("finding %+v", f)
					}
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSvchostApp: a proxy or block rule naming svchost.exe in apps is an error on Windows
// that points at services; a direct rule, or the same config linted for Linux, is not.
func TestSvchostApp(t *testing.T) {
	rule := func(apps, action string) string {
		return "[proxy.exit]\naddress = \"192.0.2.1:1080\"\n[[rule]]\nname = \"hyp\"\napps = [" + apps + "]\naction = \"" + action + "\"\n[[rule]]\nname = \"default\"\naction = \"direct\"\n"
	}
	for _, tc := range []struct {
		name, text, goos string
		want             int
	}{
		{"proxy", rule(`"VirtualBoxVM.exe", "svchost.exe"`, "proxy"), "windows", 1},
		{"block, upper case", rule(`"SVCHOST.EXE"`, "block"), "windows", 1},
		{"by path", rule(`'C:\Windows\System32\svchost.exe'`, "proxy"), "windows", 1},
		{"glob", rule(`"svc*.exe"`, "proxy"), "windows", 0},
		{"direct", rule(`"svchost.exe"`, "direct"), "windows", 0},
		{"linux", rule(`"svchost.exe"`, "proxy"), "linux", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := conf.Parse("w.toml", []byte(tc.text), conf.Options{SkipSecrets: true, OS: tc.goos})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, f := range Check(cfg, Host{OS: tc.goos}) {
				if f.Check != CheckSvchostApp {
					continue
				}
				n++
				if f.Severity != Error || f.Line == 0 || !strings.Contains(f.Fix, "services") {
					t.Errorf("finding %+v: want an error with a line, pointing at services", f)
				}
			}
			if n != tc.want {
				t.Errorf("%d svchost-app findings, want %d", n, tc.want)
			}
		})
	}
}
