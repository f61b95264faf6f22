package policy

import "net/netip"

// localPrefixes are the destinations that never leave this host or its links, whatever the
// rules say: unspecified and "this network", loopback, link-local unicast, multicast (which
// includes link-local multicast) and the IPv4 limited broadcast. This machine's own
// addresses are local too; only the platform knows them (Env.HostAddr).
//
// This is the one definition: the nftables capture, the WinDivert filters, the Windows
// engine, lint and explain all take their sets from LocalPrefixes or ask IsLocal.
var localPrefixes = [...]netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("255.255.255.255/32"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

// LocalPrefixes returns the local destination prefixes (see IsLocal) in a new slice, IPv4
// first.
func LocalPrefixes() []netip.Prefix { return append([]netip.Prefix(nil), localPrefixes[:]...) }

// IsLocal reports whether a is a destination that never leaves this host or its links:
// loopback, link-local, multicast, broadcast or unspecified. It knows nothing of this
// machine's own addresses (see Env.HostAddr). An IPv4-mapped address is judged as IPv4.
func IsLocal(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range localPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
