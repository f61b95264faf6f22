package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// leakRuleset counts, in inet's prerouting (priority raw, before conntrack), every packet that
// arrives on the uplink from the host's address or the guest subnet (IPv4), or from any
// non-link-local IPv6 source, unless it is TCP to a port of set proxy_ports on InetUplinkAddr.
// ARP, IPv6 from link-local or unspecified sources, and IPv6 neighbour discovery and
// multicast listener reports (the link's housekeeping, from any source) are not counted.
// (The IPv6 test is three rules: nft 1.0.6 compiles "ip6 saddr != fe80::/10 ip6 saddr !=
// ::" in one rule into a match that never fires.) Sets seen4 and seen6 keep the first 64
// leaked tuples (source, destination, protocol, port) for the diagnostics.
func leakRuleset() string {
	_, goPort, _ := strings.Cut(GoSocksAddr, ":")
	_, dantePort, _ := strings.Cut(DanteAddr, ":")
	return fmt.Sprintf(`table inet %[1]s {
	set proxy_ports {
		type inet_service
		elements = { %[2]s, %[3]s }
	}
	counter leak_total { }
	counter leak_tcp { }
	counter leak_udp { }
	counter leak_icmp { }
	counter leak_ipv6 { }
	set seen4 {
		typeof ip saddr . ip daddr . meta l4proto . th dport
		size 64
		flags dynamic
	}
	set seen6 {
		typeof ip6 saddr . ip6 daddr . meta l4proto . th dport
		size 64
		flags dynamic
	}
	chain pre {
		type filter hook prerouting priority raw; policy accept;
		iifname != "%[4]s" return
		ip daddr %[5]s tcp dport @proxy_ports return
		ip saddr { %[6]s, %[7]s } jump leak
		ip6 saddr fe80::/10 return
		ip6 saddr :: return
		icmpv6 type { nd-router-solicit, nd-router-advert, nd-neighbor-solicit, nd-neighbor-advert, mld-listener-report, mld2-listener-report } return
		meta nfproto ipv6 jump leak
	}
	chain leak {
		counter name "leak_total"
		meta l4proto tcp counter name "leak_tcp"
		meta l4proto udp counter name "leak_udp"
		meta l4proto { icmp, ipv6-icmp } counter name "leak_icmp"
		meta nfproto ipv6 counter name "leak_ipv6"
		meta nfproto ipv4 add @seen4 { ip saddr . ip daddr . meta l4proto . th dport }
		meta nfproto ipv6 add @seen6 { ip6 saddr . ip6 daddr . meta l4proto . th dport }
	}
}
`, LeakTable, goPort, dantePort, InetUplinkDev, InetUplinkAddr, HostUplinkAddr, GuestNetwork)
}

// natRuleset is the hypervisor's NAT: masquerade whatever leaves through the uplink. It first
// adds and deletes the table, so applying it again replaces the table.
func natRuleset() string {
	return natRemove() + fmt.Sprintf(`table ip %s {
	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "%s" masquerade
	}
}
`, NATTable, HostUplinkDev)
}

// natRemove deletes the NAT table, also when it is absent.
func natRemove() string {
	return fmt.Sprintf("add table ip %[1]s\ndelete table ip %[1]s\n", NATTable)
}

// Leaks are the leak counters (packets) of the inet namespace; see Lab.Leaks.
type Leaks struct {
	Packets uint64 // every counted packet
	TCP     uint64
	UDP     uint64
	ICMP    uint64 // ICMP and ICMPv6
	IPv6    uint64 // IPv6 packets of any protocol
}

func (l Leaks) String() string {
	return fmt.Sprintf("%d packets (tcp %d, udp %d, icmp %d, ipv6 %d)", l.Packets, l.TCP, l.UDP, l.ICMP, l.IPv6)
}

// parseLeaks reads the output of `nft -j list counters table inet rl_leak`.
func parseLeaks(out []byte) (Leaks, error) {
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name    string `json:"name"`
				Packets uint64 `json:"packets"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return Leaks{}, fmt.Errorf("parse nft counters: %w", err)
	}
	var l Leaks
	seen := 0
	for _, o := range doc.Nftables {
		if o.Counter == nil {
			continue
		}
		seen++
		switch o.Counter.Name {
		case "leak_total":
			l.Packets = o.Counter.Packets
		case "leak_tcp":
			l.TCP = o.Counter.Packets
		case "leak_udp":
			l.UDP = o.Counter.Packets
		case "leak_icmp":
			l.ICMP = o.Counter.Packets
		case "leak_ipv6":
			l.IPv6 = o.Counter.Packets
		default:
			seen--
		}
	}
	if seen != 5 {
		return Leaks{}, fmt.Errorf("parse nft counters: found %d of 5 leak counters", seen)
	}
	return l, nil
}

// Leaks reads the leak counters of the inet namespace: packets that arrived on the uplink from
// the host's address or the guest subnet (or any global IPv6 source) and are not TCP to the
// proxies (GoSocksAddr, DanteAddr). Add ports to the nft set inet rl_leak proxy_ports to
// exempt more proxies.
func (l *Lab) Leaks(ctx context.Context) (Leaks, error) {
	out, err := l.inet.Run(ctx, "nft", "-j", "list", "counters", "table", "inet", LeakTable)
	if err != nil {
		return Leaks{}, fmt.Errorf("read leak counters: %w", err)
	}
	return parseLeaks(out)
}

// LeakPackets is Leaks(ctx).Packets.
func (l *Lab) LeakPackets(ctx context.Context) (uint64, error) {
	lk, err := l.Leaks(ctx)
	return lk.Packets, err
}

// ResetLeaks sets the leak counters to zero.
func (l *Lab) ResetLeaks(ctx context.Context) error {
	if _, err := l.inet.Run(ctx, "nft", "reset", "counters", "table", "inet", LeakTable); err != nil {
		return fmt.Errorf("reset leak counters: %w", err)
	}
	return nil
}

// RemoveHypervisorNAT deletes the host's masquerade (table ip hvnat): guest traffic is then
// forwarded with its own source address, and inet has no route back. Idempotent.
func (l *Lab) RemoveHypervisorNAT(ctx context.Context) error {
	if err := l.run(ctx, natRemove(), "ip", "netns", "exec", l.host.Name(), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("remove hypervisor nat: %w", err)
	}
	return nil
}

// RestoreHypervisorNAT puts the host's masquerade back (replacing it if present).
func (l *Lab) RestoreHypervisorNAT(ctx context.Context) error {
	if err := l.run(ctx, natRuleset(), "ip", "netns", "exec", l.host.Name(), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("restore hypervisor nat: %w", err)
	}
	return nil
}
