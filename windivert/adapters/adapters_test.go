package adapters

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// fakeSystem is a System in memory.
type fakeSystem struct {
	ifs    []Interface
	nats   []netip.Prefix
	natErr error
	wsl    WSL
	wslErr error
}

func (f fakeSystem) Interfaces() ([]Interface, error) { return f.ifs, nil }
func (f fakeSystem) NATs() ([]netip.Prefix, error)    { return f.nats, f.natErr }
func (f fakeSystem) WSL() (WSL, error)                { return f.wsl, f.wslErr }

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func on(b bool) *bool { return &b }

// A Windows laptop with every kind of adapter (names as Windows 11 shows them).
var laptop = []Interface{
	{Name: "Wi-Fi", Description: "Intel(R) Wi-Fi 6 AX201 160MHz", Up: true, Prefixes: pfx("192.168.1.10/24"), Forwarding: on(false)},
	{Name: "Ethernet 2", Description: "VirtualBox Host-Only Ethernet Adapter", Up: true, Prefixes: pfx("192.168.56.1/24", "fe80::1234/64"), Forwarding: on(false)},
	{Name: "VMware Network Adapter VMnet8", Description: "VMware Virtual Ethernet Adapter for VMnet8", Up: true, Prefixes: pfx("192.168.150.1/24"), Forwarding: on(false)},
	{Name: "vEthernet (Default Switch)", Description: "Hyper-V Virtual Ethernet Adapter", Up: true, Prefixes: pfx("172.22.64.1/20"), Forwarding: on(true)},
	{Name: "vEthernet (WSL (Hyper-V firewall))", Description: "Hyper-V Virtual Ethernet Adapter #2", Up: true, Prefixes: pfx("172.29.160.1/20")},
	{Name: "vEthernet (AgentCage)", Description: "Hyper-V Virtual Ethernet Adapter #3", Up: true, Prefixes: pfx("192.168.200.1/24"), Forwarding: on(false)},
	{Name: "vEthernet (NATSwitch)", Description: "Hyper-V Virtual Ethernet Adapter #4", Up: true, Prefixes: pfx("10.77.0.1/24"), Forwarding: on(false)},
	{Name: "Loopback Pseudo-Interface 1", Description: "Software Loopback Interface 1", Up: true, Prefixes: pfx("127.0.0.1/8")},
}

func TestList(t *testing.T) {
	sys := fakeSystem{ifs: laptop, nats: pfx("10.77.0.0/24"), wsl: WSL{DNSTunneling: on(true), DefaultOutbound: "Allow"}}
	as, wsl, err := List(sys)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name       string
		kind       Kind
		nat        NAT
		subnet     string
		uncageable bool
	}{
		{"Ethernet 2", KindVirtualBox, NATUser, "192.168.56.0/24", false},
		{"VMware Network Adapter VMnet8", KindVMware, NATUser, "192.168.150.0/24", false},
		{"vEthernet (Default Switch)", KindDefaultSwitch, NATHNS, "172.22.64.0/20", true},
		{"vEthernet (WSL (Hyper-V firewall))", KindWSL, NATHNS, "172.29.160.0/20", true},
		{"vEthernet (AgentCage)", KindHyperV, NATNone, "192.168.200.0/24", false},
		{"vEthernet (NATSwitch)", KindHyperV, NATWinNAT, "10.77.0.0/24", true},
	}
	if len(as) != len(want) {
		t.Fatalf("got %d adapters %+v, want %d", len(as), as, len(want))
	}
	for i, w := range want {
		a := as[i]
		if a.Name != w.name || a.Kind != w.kind || a.NAT != w.nat || len(a.Subnets) != 1 || a.Subnets[0].String() != w.subnet || a.Uncageable() != w.uncageable {
			t.Errorf("adapter %d: %s %s nat=%s subnets=%v uncageable=%v; want %+v", i, a.Name, a.Kind, a.NAT, a.Subnets, a.Uncageable(), w)
		}
	}
	if wsl.DNSTunneling == nil || !*wsl.DNSTunneling || wsl.DefaultOutbound != "Allow" {
		t.Errorf("wsl %+v", wsl)
	}
	var b strings.Builder
	Write(&b, as, wsl)
	out := b.String()
	for _, s := range []string{
		"vEthernet (Default Switch)  [hyperv-default-switch, up]",
		"nat:         Windows NAT (Host Network Service)",
		"cage:        UNCAGED",
		"closed by construction",
		"dnsTunneling:    on",
		"default outbound (Hyper-V firewall): Allow",
		"192.168.56.1/24, fe80::1234/64",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
}

// Without Get-NetNat an internal switch's NAT is unknown, not "none".
func TestListNATUnknown(t *testing.T) {
	as, wsl, err := List(fakeSystem{ifs: laptop[5:6], natErr: errors.New("no powershell"), wslErr: errors.New("no wsl")})
	if err != nil || len(as) != 1 || as[0].NAT != NATUnknown || as[0].Uncageable() || wsl != (WSL{}) {
		t.Fatalf("%+v %+v %v", as, wsl, err)
	}
}

func TestParseWSLConfig(t *testing.T) {
	w, err := ParseWSLConfig(strings.NewReader(`
[wsl2]
memory=8GB
networkingMode = NAT
dnsTunneling=false # the host's Dnscache otherwise
Firewall=true
[experimental]
dnsTunneling=true
`))
	if err != nil || w.Mode != "nat" || w.DNSTunneling == nil || *w.DNSTunneling || w.Firewall == nil || !*w.Firewall {
		t.Fatalf("%+v %v", w, err)
	}
}

func TestUncaged(t *testing.T) {
	on, off := true, false
	defSwitch := Adapter{Interface: Interface{Name: "vEthernet (Default Switch)"}, Kind: KindDefaultSwitch, NAT: NATHNS, Subnets: []netip.Prefix{netip.MustParsePrefix("172.22.64.0/20")}}
	wsl := Adapter{Interface: Interface{Name: "vEthernet (WSL)"}, Kind: KindWSL, NAT: NATHNS, Subnets: []netip.Prefix{netip.MustParsePrefix("172.29.160.0/20")}}
	internal := Adapter{Interface: Interface{Name: "vEthernet (AgentCage)", Forwarding: &off}, Kind: KindHyperV, NAT: NATNone, Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.200.0/24")}}
	routed := internal
	routed.Forwarding = &on
	vbox := Adapter{Interface: Interface{Name: "VirtualBox Host-Only Ethernet Adapter", Forwarding: &off}, Kind: KindVirtualBox, NAT: NATUser, Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.56.0/24")}}
	icsVbox := vbox
	icsVbox.Forwarding = &on
	cage := []netip.Prefix{netip.MustParsePrefix("192.168.200.0/24")}
	names := func(as []Adapter) string {
		var s []string
		for _, a := range as {
			s = append(s, a.Name)
		}
		return strings.Join(s, ", ")
	}
	for _, tc := range []struct {
		name string
		as   []Adapter
		wsl  WSL
		want string
	}{
		{"default switch and wsl", []Adapter{defSwitch, wsl, internal, vbox}, WSL{}, "vEthernet (Default Switch), vEthernet (WSL)"},
		{"wsl closed by the Hyper-V firewall", []Adapter{wsl}, WSL{Firewall: &on, DefaultOutbound: "Block"}, ""},
		{"wsl mirrored", nil, WSL{Mode: "mirrored"}, "WSL2 (mirrored networking)"},
		{"wsl mirrored, closed by the Hyper-V firewall", nil, WSL{Mode: "mirrored", DefaultOutbound: "Block"}, ""},
		{"wsl firewall off", []Adapter{wsl}, WSL{Firewall: &off, DefaultOutbound: "Block"}, "vEthernet (WSL)"},
		{"internal forwarding, a cage subnet", []Adapter{routed}, WSL{}, ""},
		{"host-only (the hypervisor NATs, caged as its processes)", []Adapter{vbox}, WSL{}, ""},
		{"host-only with forwarding on (ICS)", []Adapter{icsVbox}, WSL{}, "VirtualBox Host-Only Ethernet Adapter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(Uncaged(tc.as, cage, tc.wsl)); got != tc.want {
				t.Errorf("Uncaged = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestExternalSwitch: a vEthernet adapter with the LAN's gateway is an External switch:
// reported as bridged, never "closed by construction".
func TestExternalSwitch(t *testing.T) {
	off := false
	ext := Adapter{Interface: Interface{Name: "vEthernet (LAN)", Forwarding: &off, Gateway: true}, Kind: KindHyperV, NAT: NATNone, Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")}}
	if !ext.External() {
		t.Fatal("not External")
	}
	var b strings.Builder
	Write(&b, []Adapter{ext}, WSL{})
	if out := b.String(); !strings.Contains(out, "cage:        BRIDGED") || strings.Contains(out, "closed by construction") {
		t.Errorf("report:\n%s", out)
	}
}

// TestCovered: an adapter is covered by the cage subnets when it has a subnet and each lies
// inside one of them (a wider cage subnet covers a narrower adapter subnet, not the other
// way); one without an address never is. Walled and Uncaged ask it, and so does lint.
func TestCovered(t *testing.T) {
	cage := []netip.Prefix{netip.MustParsePrefix("192.168.200.0/24"), netip.MustParsePrefix("fd00:c::/64")}
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name    string
		subnets []netip.Prefix
		want    bool
	}{
		{"no address", nil, false},
		{"the cage subnet", []netip.Prefix{p("192.168.200.0/24")}, true},
		{"inside it", []netip.Prefix{p("192.168.200.128/25")}, true},
		{"wider than it", []netip.Prefix{p("192.168.0.0/16")}, false},
		{"another", []netip.Prefix{p("192.168.1.0/24")}, false},
		{"both families inside", []netip.Prefix{p("192.168.200.0/24"), p("fd00:c::/64")}, true},
		{"one of two outside", []netip.Prefix{p("192.168.200.0/24"), p("fd00:d::/64")}, false},
	} {
		a := Adapter{Interface: Interface{Name: "vEthernet (AgentCage)"}, Kind: KindHyperV, NAT: NATNone, Subnets: tc.subnets}
		if got := a.Covered(cage); got != tc.want {
			t.Errorf("%s: Covered = %v, want %v", tc.name, got, tc.want)
		}
		if got := a.Walled(cage); got != tc.want {
			t.Errorf("%s: a Hyper-V switch's Walled = %v, want Covered's %v", tc.name, got, tc.want)
		}
	}
}
