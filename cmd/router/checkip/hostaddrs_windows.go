package checkip

import (
	"net/netip"

	"golang.org/x/sys/windows"
	"golang.zx2c4.com/wireguard/windows/tunnel/winipcfg"
)

// systemGateways reads the default routes of the IP Helper's route table (no privileges
// needed).
func systemGateways() []Target {
	rows, err := winipcfg.GetIPForwardTable2(windows.AF_UNSPEC)
	if err != nil {
		return nil
	}
	var out []Target
	for _, r := range rows {
		if r.DestinationPrefix.PrefixLength != 0 {
			continue
		}
		g := r.NextHop.Addr()
		if !g.IsValid() || g.IsUnspecified() {
			continue
		}
		why := "default gateway"
		if g.Is6() {
			why = "default gateway (IPv6)"
		}
		out = append(out, Target{Addr: g.Unmap(), Why: why})
	}
	return out
}

// systemResolvers reads the DNS servers of the adapters that are up.
func systemResolvers() []netip.Addr {
	aas, err := winipcfg.GetAdaptersAddresses(windows.AF_UNSPEC, winipcfg.GAAFlagDefault)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range aas {
		if a.OperStatus != winipcfg.IfOperStatusUp {
			continue
		}
		for d := a.FirstDNSServerAddress; d != nil; d = d.Next {
			if ip, ok := netip.AddrFromSlice(d.Address.IP()); ok && !ip.Unmap().IsLoopback() {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}
