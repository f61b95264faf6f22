package router

import (
	"net/netip"

	"github.com/agentcage/router/rules/policy"
)

// A guest is the unit of fairness: set-up slots, flows (their descriptors), UDP flows and
// associations and an inbound's connections are shared between guests, not between source
// addresses, so that a guest that owns a whole network (antispoof accepts any address
// inside a VM network, and a VM with root can take many) gets one share however many
// addresses it uses. Limits per source address stay, inside the guest's share.
//
// How a guest is identified, on every OS alike (guestOf is the one place that says it):
//   - a VM: the [capture] vm_networks entry its source address is in. Antispoof (Linux:
//     the guard's nftables rule; Windows: the engine) refuses a new flow whose source does
//     not route back to the interface it came from, so a guest cannot borrow another VM
//     network's addresses; a VM network is thus one VM interface's. Two VMs on one network
//     (a bridge) share one guest's share: give each VM a network of its own to have them
//     apart. A flow from a VM-facing interface whose source is in no VM network (Windows'
//     FromVM, an inbound's client outside vm_networks) is its own address's guest.
//   - a caged app (a user-space NAT carrying its guests' traffic) and any other process of
//     this host: the process's executable when the owner is known (Linux: /proc/PID/exe;
//     Windows: the image path), so every instance of one app shares one share; else the
//     local address.
func guestOf(src netip.Addr, vmNets []netip.Prefix) string {
	src = src.Unmap().WithZone("")
	for _, n := range vmNets {
		if n.Contains(src) {
			return "vm " + n.Masked().String()
		}
	}
	return "vm " + src.String()
}

// sourceKey names the guest a flow is budgeted under (see guestOf): a VM's network, the app
// of a local flow when its owner is known, else the local address.
func sourceKey(pf *policy.Flow, p *compiled) string {
	switch {
	case pf.FromVM || p.Decision.FromVMNetwork(pf.Src):
		return guestOf(pf.Src, p.Decision.VMNetworks())
	case pf.AppPath != "":
		return "app " + pf.AppPath
	case pf.App != "":
		return "app " + pf.App
	}
	return "host " + pf.Src.String()
}

// inboundGuest is the guest of an inbound's client a: its VM network, else the entry of the
// inbound's allow list it is in (the narrowest: an allow entry names a guest's network as
// vm_networks does, for guests that are pointed at the inbound rather than captured), else
// its address. A connection the router carries there (a chain) is its local address's: its
// guest's own flow already holds that guest's shares.
func inboundGuest(a netip.Addr, vmNets, allow []netip.Prefix) string {
	a = a.Unmap().WithZone("")
	if g := guestOf(a, vmNets); g != "vm "+a.String() {
		return g
	}
	best := netip.Prefix{}
	for _, p := range allow {
		if p.Contains(a) && (!best.IsValid() || p.Bits() > best.Bits()) {
			best = p
		}
	}
	if best.IsValid() {
		return "vm " + best.Masked().String()
	}
	return "vm " + a.String()
}
