// Package adapters lists this machine's VM-facing network adapters on Windows (VirtualBox
// host-only, VMware VMnet, Hyper-V vEthernet switches including the Default Switch, WSL),
// with their addresses and subnets, whether the host forwards IP for them, and whether
// Windows NAT does: what `router adapters` prints and what lint checks a config against.
//
// The system is behind System (the Windows one reads the IP Helper tables through
// golang.zx2c4.com/wireguard/windows/tunnel/winipcfg); the classification and the report are
// pure, and tested on any OS with a System in memory.
//
// What each kind means for the cage:
//   - VirtualBox host-only and VMware VMnet adapters carry guests whose outbound traffic the
//     hypervisor NATs in its own processes: the router cages those processes (presets); the
//     adapter itself is where a forward listens.
//   - Hyper-V's Default Switch and WSL2's adapter are NATed by Windows in the kernel (the
//     Host Network Service's WinNAT): no capture sees their guests, so they are uncaged
//     unless nothing forwards for them.
//   - Another vEthernet adapter is a Hyper-V switch: an Internal switch without NAT (no
//     WinNAT instance for its subnet, forwarding off) gives its guests no route out but the
//     router's inbound and forwards, the closed-by-construction mode ([capture] cage_subnets).
package adapters

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
)

// Kind is what kind of VM-facing adapter an adapter is.
type Kind string

// Kinds of adapters.
const (
	KindVirtualBox    Kind = "virtualbox-host-only"
	KindVMware        Kind = "vmware-vmnet"
	KindDefaultSwitch Kind = "hyperv-default-switch"
	KindWSL           Kind = "wsl"
	KindHyperV        Kind = "hyperv-switch"
)

// NAT says who translates an adapter's guests' traffic to the host's address.
type NAT string

// NAT states.
const (
	NATWinNAT  NAT = "winnat"  // a WinNAT instance (Get-NetNat) covers the adapter's subnet
	NATHNS     NAT = "hns"     // Windows' Host Network Service NATs it (Default Switch, WSL)
	NATNone    NAT = "none"    // no NAT instance covers it
	NATUnknown NAT = "unknown" // the NAT instances could not be listed
	NATUser    NAT = "user"    // the hypervisor NATs in its own processes (VirtualBox, VMware)
)

// Interface is what the system says of one network adapter.
type Interface struct {
	Name        string         // the friendly name, e.g. "vEthernet (Default Switch)"
	LUID        uint64         // the interface's LUID (0: unknown), what WFP filters name
	Description string         // e.g. "Hyper-V Virtual Ethernet Adapter"
	Up          bool           // operational status up
	Prefixes    []netip.Prefix // unicast addresses with their on-link prefix length
	// Forwarding is true when IP forwarding is on for the adapter (either family); nil
	// when unknown.
	Forwarding *bool
	// Gateway is true when the adapter has a default gateway: a Hyper-V External switch's
	// host adapter shares the physical network and its gateway; an Internal switch's has
	// none.
	Gateway bool
}

// WSL is what can be told of WSL2's networking: the user's .wslconfig and the Hyper-V
// firewall's settings for WSL. A nil field is unknown (not set, or not readable).
type WSL struct {
	Mode            string // [wsl2] networkingMode: "nat" (default), "mirrored", ...
	DNSTunneling    *bool  // [wsl2] dnsTunneling: DNS through the host's resolver (Dnscache)
	Firewall        *bool  // [wsl2] firewall: the Hyper-V firewall applies to WSL
	DefaultOutbound string // the Hyper-V firewall's DefaultOutboundAction for WSL ("Allow", "Block")
}

// System is the machine's side: the Windows one, or a fake.
type System interface {
	// Interfaces lists every adapter.
	Interfaces() ([]Interface, error)
	// NATs lists the internal prefixes of the WinNAT instances; an error when they cannot
	// be listed (NAT is then NATUnknown for the Hyper-V switches).
	NATs() ([]netip.Prefix, error)
	// WSL reads WSL2's settings; an error when none can be read.
	WSL() (WSL, error)
}

// Adapter is a VM-facing adapter.
type Adapter struct {
	Interface
	Kind Kind
	NAT  NAT
	// Subnets are the networks of its addresses (link-local left out).
	Subnets []netip.Prefix
}

// External reports whether the adapter is a Hyper-V External switch's (a vEthernet adapter
// with a default gateway): its guests are bridged to the host's LAN, below the host's
// network stack, where neither WinDivert nor WFP sees them: not caged, and not closed.
func (a Adapter) External() bool { return a.Kind == KindHyperV && a.Gateway }

// Forwards reports whether something carries the adapter's guests off the host by itself
// (Windows NAT, or IP forwarding), where no capture sees them.
func (a Adapter) Forwards() bool {
	return a.NAT == NATWinNAT || a.NAT == NATHNS || a.Forwarding != nil && *a.Forwarding
}

// Uncageable reports whether the adapter's guests leave through Windows without any
// process of the host (kernel NAT or forwarding): no capture sees them.
func (a Adapter) Uncageable() bool {
	switch a.Kind {
	case KindDefaultSwitch, KindWSL, KindHyperV:
		return a.Forwards()
	}
	return false
}

// Walled reports whether the guard walls this machine off from the adapter's guests (no
// connection arriving on it reaches a host service but the router's forwards and inbounds
// and DHCP): VirtualBox's and VMware's adapters always, a Hyper-V switch when its subnets
// are cage subnets. The Default Switch and WSL are left alone: Windows NATs them in the
// kernel, so their guests are not caged anyway, and their DNS is a host service on the
// adapter's address.
func (a Adapter) Walled(cageSubnets []netip.Prefix) bool {
	switch a.Kind {
	case KindVirtualBox, KindVMware:
		return true
	case KindHyperV:
		return a.Covered(cageSubnets)
	}
	return false
}

// Covered reports whether the adapter has a subnet and each of its subnets lies inside one of
// cageSubnets ([capture] cage_subnets): the one test of whether the config names an
// adapter's guests as caged, which Walled, Uncaged and `router lint` (an External switch
// outside them) all ask.
func (a Adapter) Covered(cageSubnets []netip.Prefix) bool {
	return len(a.Subnets) > 0 && allCovered(cageSubnets, a.Subnets)
}

// allCovered reports whether every subnet lies inside one of cages.
func allCovered(cages, subnets []netip.Prefix) bool {
	for _, s := range subnets {
		ok := false
		for _, c := range cages {
			if c.Bits() <= s.Bits() && c.Contains(s.Addr()) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// Classify returns the kind of a VM-facing adapter, false for any other.
func Classify(i Interface) (Kind, bool) {
	name, desc := strings.ToLower(i.Name), strings.ToLower(i.Description)
	switch {
	case strings.Contains(desc, "virtualbox host-only") || strings.Contains(name, "virtualbox host-only"):
		return KindVirtualBox, true
	case strings.Contains(desc, "vmware virtual ethernet") || strings.Contains(name, "vmnet"):
		return KindVMware, true
	case strings.HasPrefix(name, "vethernet (default switch)"):
		return KindDefaultSwitch, true
	case strings.HasPrefix(name, "vethernet (wsl"):
		return KindWSL, true
	case strings.HasPrefix(name, "vethernet") || strings.Contains(desc, "hyper-v virtual ethernet"):
		return KindHyperV, true
	}
	return "", false
}

// List returns the VM-facing adapters of sys, in the system's order, and the WSL settings
// (the zero WSL when none could be read). It fails only when the adapters cannot be listed.
func List(sys System) ([]Adapter, WSL, error) {
	ifs, err := sys.Interfaces()
	if err != nil {
		return nil, WSL{}, fmt.Errorf("list adapters: %w", err)
	}
	nats, natErr := sys.NATs()
	var out []Adapter
	for _, i := range ifs {
		k, ok := Classify(i)
		if !ok {
			continue
		}
		a := Adapter{Interface: i, Kind: k}
		for _, p := range i.Prefixes {
			if p.Addr().IsLinkLocalUnicast() {
				continue
			}
			if n := p.Masked(); !slices.Contains(a.Subnets, n) {
				a.Subnets = append(a.Subnets, n)
			}
		}
		a.NAT = natOf(a, nats, natErr)
		out = append(out, a)
	}
	wsl, err := sys.WSL()
	if err != nil {
		wsl = WSL{}
	}
	return out, wsl, nil
}

func natOf(a Adapter, nats []netip.Prefix, natErr error) NAT {
	switch a.Kind {
	case KindVirtualBox, KindVMware:
		return NATUser
	}
	for _, s := range a.Subnets {
		for _, n := range nats {
			if n.Overlaps(s) {
				return NATWinNAT
			}
		}
	}
	switch {
	case a.Kind == KindDefaultSwitch || a.Kind == KindWSL:
		// The Host Network Service's NAT does not show in Get-NetNat on every build; these
		// two are NATed by design (a mirrored WSL has no vEthernet adapter at all).
		return NATHNS
	case natErr != nil:
		return NATUnknown
	}
	return NATNone
}

// Write prints the adapters for people: one block each, then WSL's settings when known.
func Write(w io.Writer, as []Adapter, wsl WSL) {
	if len(as) == 0 {
		fmt.Fprintln(w, "no VM-facing adapter (VirtualBox host-only, VMware VMnet, Hyper-V vEthernet, WSL) found")
	}
	for _, a := range as {
		state := "down"
		if a.Up {
			state = "up"
		}
		fmt.Fprintf(w, "%s  [%s, %s]\n", a.Name, a.Kind, state)
		if a.Description != "" {
			fmt.Fprintf(w, "  description: %s\n", a.Description)
		}
		var addrs, subnets []string
		for _, p := range a.Prefixes {
			addrs = append(addrs, p.String())
		}
		for _, s := range a.Subnets {
			subnets = append(subnets, s.String())
		}
		fmt.Fprintf(w, "  addresses:   %s\n", orNone(addrs))
		fmt.Fprintf(w, "  subnets:     %s\n", orNone(subnets))
		fwd := "unknown"
		if a.Forwarding != nil {
			fwd = map[bool]string{true: "on", false: "off"}[*a.Forwarding]
		}
		fmt.Fprintf(w, "  forwarding:  %s\n", fwd)
		fmt.Fprintf(w, "  nat:         %s\n", natText(a.NAT))
		fmt.Fprintf(w, "  cage:        %s\n", cageText(a))
	}
	if wsl == (WSL{}) {
		return
	}
	fmt.Fprintln(w, "WSL2:")
	fmt.Fprintf(w, "  networkingMode:  %s\n", orDefault(wsl.Mode, "nat (default)"))
	fmt.Fprintf(w, "  dnsTunneling:    %s\n", boolText(wsl.DNSTunneling, "on: the guest's DNS goes through the host's Dnscache (caged only with [dns] capture = \"all\", and never through the router's fake IPs for WSL's own sockets)"))
	fmt.Fprintf(w, "  firewall:        %s\n", boolText(wsl.Firewall, "on: the Hyper-V firewall applies to WSL"))
	fmt.Fprintf(w, "  default outbound (Hyper-V firewall): %s\n", orDefault(wsl.DefaultOutbound, "unknown"))
}

func natText(n NAT) string {
	switch n {
	case NATWinNAT:
		return "Windows NAT (a WinNAT instance covers its subnet)"
	case NATHNS:
		return "Windows NAT (Host Network Service)"
	case NATNone:
		return "none"
	case NATUser:
		return "the hypervisor's own processes (caged as apps)"
	}
	return "unknown (Get-NetNat could not be read)"
}

func cageText(a Adapter) string {
	switch {
	case (a.Kind == KindVirtualBox || a.Kind == KindVMware) && a.Forwarding != nil && *a.Forwarding:
		return "UNCAGED: IP forwarding is on (Internet Connection Sharing turns it on): its guests can route out through the host's kernel, past the hypervisor's caged processes; turn forwarding and ICS off for it (Set-NetIPInterface -Forwarding Disabled); the router refuses to start meanwhile"
	case a.Kind == KindVirtualBox || a.Kind == KindVMware:
		return "guests leave through the hypervisor's processes: cage them with hypervisors = [\"virtualbox\"] or [\"vmware\"]; forwards may listen here; the guard walls this host's services off from its guests (only the forwards, the inbounds and DHCP answer them); a VM bridged to a host adapter instead is not caged (see BRIDGED)"
	case a.Uncageable():
		return "UNCAGED: Windows carries its guests out in the kernel, where no capture sees them; for an agent use an Internal switch without NAT and put its subnet in cage_subnets"
	case a.External():
		return "BRIDGED: an External switch (it has the LAN's gateway): its guests are machines of the host's LAN, whose frames pass below the host's network stack where neither WinDivert nor WFP sees them: not caged, and the guard does not hold them; for an agent use an Internal switch without NAT in cage_subnets"
	case a.NAT == NATUnknown:
		return "unknown: if nothing NATs or forwards for it (an Internal switch), its subnet goes in cage_subnets"
	}
	return "closed by construction (no NAT, no forwarding): put its subnet in cage_subnets (the guard then also walls this host's services off from it); guests reach the internet only through the router's inbound"
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func boolText(b *bool, on string) string {
	switch {
	case b == nil:
		return "not set"
	case *b:
		return on
	}
	return "off"
}

// Uncaged returns the adapters whose guests can leave through Windows where no capture
// sees them and that nothing closes: Uncageable ones (kernel NAT, or forwarding on a
// Hyper-V switch) whose subnets are not all in cageSubnets (the guard then blocks
// forwarding from them) and, for WSL's adapter, whose Hyper-V firewall default outbound is
// not Block (docs/hyperv.md's recipe); and VirtualBox or VMware adapters with IP forwarding
// on (Internet Connection Sharing turns it on), whose guests can route out through the
// host's kernel past the hypervisor's caged processes. WSL2 in mirrored networking mode
// has no adapter of its own: it counts, as "WSL2 (mirrored networking)", unless the
// Hyper-V firewall blocks WSL's outbound. It is the one decision `router lint` reports
// and the Windows daemon refuses to start on unless the config accepts it ([capture]
// uncaged_adapters = "accept").
func Uncaged(as []Adapter, cageSubnets []netip.Prefix, wsl WSL) []Adapter {
	var out []Adapter
	if strings.EqualFold(wsl.Mode, "mirrored") && !wslClosed(wsl) {
		out = append(out, Adapter{Interface: Interface{Name: "WSL2 (mirrored networking)"}, Kind: KindWSL})
	}
	for _, a := range as {
		switch {
		case (a.Kind == KindVirtualBox || a.Kind == KindVMware) && a.Forwarding != nil && *a.Forwarding:
			out = append(out, a)
		case !a.Uncageable():
		case a.Covered(cageSubnets):
		case a.Kind == KindWSL && wslClosed(wsl):
		default:
			out = append(out, a)
		}
	}
	return out
}

// wslClosed reports whether the Hyper-V firewall blocks WSL's outbound by default (and is
// not turned off for WSL): docs/hyperv.md's recipe.
func wslClosed(wsl WSL) bool {
	return strings.EqualFold(wsl.DefaultOutbound, "Block") && (wsl.Firewall == nil || *wsl.Firewall)
}
