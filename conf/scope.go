package conf

import (
	"net/netip"
	"strconv"
)

// This file decides what each operating system's capture can see of a config, and refuses
// what none can:
//
//   - [dns] capture: "all" answers every captured query, "caged" only those of caged
//     processes (the apps and services of proxy and block rules, the hypervisors' images) and
//     of VM networks. Default: "all" with [capture] local = true, "caged" without. On Linux
//     the choice is fixed by local (nftables redirects every DNS query of this host with
//     local = true, and none without), so the other value is refused there.
//   - [capture] cage_subnets (Windows): subnets whose guests have no route out but through
//     the router, a Hyper-V Internal switch without NAT. They are VM networks (sources in
//     them are caged), and the guard forbids forwarding from them in every state.
//   - [capture] vm_networks on Windows: no capture sees traffic forwarded from a VM network
//     there (WinDivert takes this host's own packets; VirtualBox and VMware NAT their guests
//     in their own processes, which are caged as apps; Hyper-V and WSL2 forward in the
//     kernel). An entry that no cage subnet covers is refused, with that reason.

// scope fills the defaults that depend on other keys, once every table is decoded.
func (d *decoder) scope(c *Config) {
	if c.DNS.Capture == "" {
		c.DNS.Capture = DefaultDNSCapture(c.Capture.Local)
	}
	for _, n := range c.Capture.CageSubnets {
		if !containsPrefix(c.Capture.VMNetworks, n) {
			c.Capture.VMNetworks = append(c.Capture.VMNetworks, n)
		}
	}
}

// checkScope refuses what the capture of the target operating system cannot see.
func (d *decoder) checkScope(c *Config) {
	if d.opts.goos() != "windows" {
		if len(c.Capture.CageSubnets) > 0 {
			d.fail(at{path: "capture.cage_subnets"}, "cage subnets are for Windows (a Hyper-V Internal switch); on Linux list the VM subnets in vm_networks, whose forwarded traffic nftables captures")
		}
		switch {
		case c.Capture.Local && c.DNS.Capture == DNSCaptureCaged:
			d.fail(at{path: "dns.capture"}, "\"caged\" with local = true: on Linux the capture takes every DNS query of this host when local = true; leave capture out (or \"all\"), or set local = false")
		case !c.Capture.Local && c.DNS.Capture == DNSCaptureAll:
			d.fail(at{path: "dns.capture"}, "\"all\" with local = false: on Linux this host's own DNS is captured only with local = true; leave capture out (or \"caged\"), or set local = true")
		}
		return
	}
	for i, n := range c.Capture.VMNetworks {
		if coveredBy(c.Capture.CageSubnets, n) {
			continue
		}
		d.fail(at{path: "capture.vm_networks[" + strconv.Itoa(i+1) + "]"},
			"%s: on Windows no capture sees traffic forwarded from a VM network (WinDivert takes this host's own packets only): a VirtualBox or VMware NAT guest is caged as its hypervisor's process (hypervisors = [\"virtualbox\"] or [\"vmware\"]); a Hyper-V or WSL2 guest behind Windows NAT cannot be caged at all; a Hyper-V Internal switch without NAT goes in cage_subnets", n)
	}
	for i, n := range c.Capture.CageSubnets {
		if n.Bits() == 0 {
			d.fail(at{path: "capture.cage_subnets[" + strconv.Itoa(i+1) + "]"}, "%s is every address: the guard would stop this host forwarding anything; give the internal switch's subnet", n)
		}
	}
}

func containsPrefix(ps []netip.Prefix, n netip.Prefix) bool {
	for _, p := range ps {
		if p == n {
			return true
		}
	}
	return false
}

// coveredBy reports whether n lies inside one of ps.
func coveredBy(ps []netip.Prefix, n netip.Prefix) bool {
	for _, p := range ps {
		if p.Bits() <= n.Bits() && p.Contains(n.Addr()) {
			return true
		}
	}
	return false
}
