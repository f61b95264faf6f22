// Package adapterstest holds the Windows host's virtual adapters as the adapters package
// reports them, for the tests of what reads them (lint's findings, the Windows capture's
// refusal to start beside an uncaged switch): one description of each adapter.
package adapterstest

import (
	"net/netip"

	"github.com/agentcage/router/windivert/adapters"
)

// DefaultSwitch is Hyper-V's Default Switch: its guests are NATed by WinNAT in the kernel.
func DefaultSwitch() adapters.Adapter {
	return adapters.Adapter{Interface: adapters.Interface{Name: "vEthernet (Default Switch)"}, Kind: adapters.KindDefaultSwitch,
		NAT: adapters.NATHNS, Subnets: []netip.Prefix{netip.MustParsePrefix("172.22.64.0/20")}}
}

// WSL is WSL2's NAT adapter.
func WSL() adapters.Adapter {
	return adapters.Adapter{Interface: adapters.Interface{Name: "vEthernet (WSL)"}, Kind: adapters.KindWSL,
		NAT: adapters.NATHNS, Subnets: []netip.Prefix{netip.MustParsePrefix("172.29.160.0/20")}}
}

// ClosedWSL is WSL's settings with the Hyper-V firewall on and outbound blocked by default.
func ClosedWSL() adapters.WSL {
	on := true
	return adapters.WSL{Firewall: &on, DefaultOutbound: "Block"}
}

// HostOnlyICS is VirtualBox's host-only adapter with Internet Connection Sharing on (it
// forwards its guests' packets).
func HostOnlyICS() adapters.Adapter {
	on := true
	return adapters.Adapter{Interface: adapters.Interface{Name: "VirtualBox Host-Only Ethernet Adapter", Forwarding: &on},
		Kind: adapters.KindVirtualBox, NAT: adapters.NATUser, Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.56.0/24")}}
}
