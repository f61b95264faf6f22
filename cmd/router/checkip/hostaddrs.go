package checkip

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// SystemHostTargets is the host probe's discovery on this guest: the default gateways (IPv4
// and IPv6, from the routing table), the private resolvers of its DNS configuration, the first
// address of each network of its interfaces (where a host-only or internal network puts the
// host: VirtualBox's 192.168.56.1, VMware's .1, a Hyper-V switch's host address) and the
// metadata service (MetadataAddr, port 80), in that order; and the guest's own addresses, which are never probed. What cannot be read is left
// out.
func SystemHostTargets() (targets []Target, own []netip.Addr) {
	var prefixes []netip.Prefix
	if ifs, err := net.Interfaces(); err == nil {
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, err := ifc.Addrs()
			if err != nil {
				continue
			}
			for _, a := range addrs {
				n, ok := a.(*net.IPNet)
				if !ok {
					continue
				}
				ip, ok := netip.AddrFromSlice(n.IP)
				if !ok {
					continue
				}
				ones, _ := n.Mask.Size()
				ip = ip.Unmap()
				own = append(own, ip)
				if p, err := ip.Prefix(ones); err == nil {
					prefixes = append(prefixes, netip.PrefixFrom(ip, p.Bits()))
				}
			}
		}
	}
	targets = append(targets, systemGateways()...)
	for _, r := range systemResolvers() {
		// A public resolver is not the host (and reached through the cage it is the
		// proxy's business); a private one is the hypervisor's NAT DNS, on the host side.
		if r.IsPrivate() || r.IsLinkLocalUnicast() {
			targets = append(targets, Target{Addr: r, Why: "resolver"})
		}
	}
	targets = append(targets, SubnetTargets(prefixes)...)
	targets = append(targets, Target{Addr: MetadataAddr, Why: "metadata service", Ports: []uint16{80}})
	return targets, own
}

// SubnetTargets returns, for each IPv4 interface address with its prefix (a network of at
// most /30, not link-local), the network's first address when it is not the address itself:
// where host-only and internal networks put the host.
func SubnetTargets(addrs []netip.Prefix) []Target {
	var out []Target
	for _, p := range addrs {
		a := p.Addr()
		if !a.Is4() || p.Bits() > 30 || p.Bits() < 8 || a.IsLinkLocalUnicast() || a.IsLoopback() {
			continue
		}
		first := p.Masked().Addr().Next()
		if first == a {
			continue
		}
		out = append(out, Target{Addr: first, Why: "first address of " + p.Masked().String()})
	}
	return out
}

// ParseProcRoute returns the IPv4 default gateways of a Linux /proc/net/route table.
func ParseProcRoute(b []byte) []netip.Addr {
	var out []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[1] != "00000000" {
			continue
		}
		flags, err := strconv.ParseUint(f[3], 16, 16)
		if err != nil || flags&0x2 == 0 { // RTF_GATEWAY
			continue
		}
		g, err := hex.DecodeString(f[2])
		if err != nil || len(g) != 4 {
			continue
		}
		var a [4]byte
		binary.LittleEndian.PutUint32(a[:], binary.BigEndian.Uint32(g))
		if ip := netip.AddrFrom4(a); !ip.IsUnspecified() {
			out = append(out, ip)
		}
	}
	return out
}

// ParseProcIPv6Route returns the IPv6 default gateways of a Linux /proc/net/ipv6_route
// table, a link-local one with its interface as zone.
func ParseProcIPv6Route(b []byte) []netip.Addr {
	var out []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[1] != "00" || f[0] != strings.Repeat("0", 32) {
			continue
		}
		g, err := hex.DecodeString(f[4])
		if err != nil || len(g) != 16 {
			continue
		}
		ip := netip.AddrFrom16([16]byte(g))
		if ip.IsUnspecified() {
			continue
		}
		if ip.IsLinkLocalUnicast() {
			ip = ip.WithZone(f[9])
		}
		out = append(out, ip)
	}
	return out
}

// ParseResolvConf returns the nameservers of a resolv.conf that are not loopback (a local
// stub is the guest's own).
func ParseResolvConf(b []byte) []netip.Addr {
	var out []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if ip, err := netip.ParseAddr(f[1]); err == nil && !ip.IsLoopback() {
			out = append(out, ip.Unmap())
		}
	}
	return out
}
