package checkip

import (
	"net/netip"
	"os"
)

// systemGateways reads the default routes of /proc/net/route and /proc/net/ipv6_route.
func systemGateways() []Target {
	var out []Target
	if b, err := os.ReadFile("/proc/net/route"); err == nil {
		for _, g := range ParseProcRoute(b) {
			out = append(out, Target{Addr: g, Why: "default gateway"})
		}
	}
	if b, err := os.ReadFile("/proc/net/ipv6_route"); err == nil {
		for _, g := range ParseProcIPv6Route(b) {
			out = append(out, Target{Addr: g, Why: "default gateway (IPv6)"})
		}
	}
	return out
}

// systemResolvers reads /etc/resolv.conf.
func systemResolvers() []netip.Addr {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	return ParseResolvConf(b)
}
