package nftcap

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestInboundGuard: an inbound's port on the VM-facing address (IPv4) and on every address
// (IPv6 ::) takes its allowed sources only, like a forward's, and is refused from the others:
// another VM source, the LAN, another host address. The table names its own chains.
func TestInboundGuard(t *testing.T) {
	s := newScene(t)
	spec := sceneSpec()
	const socksPort, httpPort = 1080, 3128
	spec.Inbounds = []Forward{
		{Listen: netip.MustParseAddrPort(hostPort(hostVM4, socksPort)), Allow: []netip.Prefix{netip.MustParsePrefix(vmAddr4 + "/32")}},
		{Listen: netip.MustParseAddrPort(hostPort("::", httpPort)), Allow: []netip.Prefix{netip.MustParsePrefix(vmAddr6 + "/128"), netip.MustParsePrefix(netAddr4 + "/32")}},
	}
	s.install(t, spec)
	if table := listTable(t, s.host, spec.Table); !strings.Contains(table, "chain inbound_0") || !strings.Contains(table, "chain inbound_1") {
		t.Fatalf("no inbound chains:\n%s", table)
	}
	socks := s.host.listen(t, "tcp", hostPort("::", socksPort))
	web := s.host.listen(t, "tcp", hostPort("::", httpPort))
	for _, tc := range []struct {
		name    string
		ns      *netns
		d       net.Dialer
		dst     string
		ln      net.Listener
		allowed bool
	}{
		{"socks allowed", s.vm, from(vmAddr4), hostPort(hostVM4, socksPort), socks, true},
		{"socks other vm source", s.vm, from(vmAddr4b), hostPort(hostVM4, socksPort), socks, false},
		{"socks ipv6 vm source", s.vm, from(vmAddr6), hostPort(hostVM6, socksPort), socks, false},
		{"socks allowed source, other host address", s.vm, from(vmAddr4), hostPort(hostNet4, socksPort), socks, false},
		{"socks lan", s.net, net.Dialer{}, hostPort(hostVM4, socksPort), socks, false},
		{"http ipv6 allowed", s.vm, from(vmAddr6), hostPort(hostVM6, httpPort), web, true},
		{"http lan host allowed", s.net, net.Dialer{}, hostPort(hostNet4, httpPort), web, true},
		{"http ipv6 other vm source", s.vm, from(vmAddr6b), hostPort(hostVM6, httpPort), web, false},
		{"http ipv4 vm source", s.vm, from(vmAddr4), hostPort(hostVM4, httpPort), web, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.allowed {
				if tc.ns == s.vm {
					s.noLeak(t, func() { expectRefused(t, tc.ns, tc.d, tc.dst) })
				} else {
					expectRefused(t, tc.ns, tc.d, tc.dst) // the reset reaches the LAN: an answer, not a leak
				}
				expectNoAccept(t, tc.ln)
				return
			}
			c, err := tc.ns.dial(t, tc.d, "tcp", tc.dst)
			if err != nil {
				t.Fatalf("dial %s: %v", tc.dst, err)
			}
			defer c.Close()
			ac, err := accept(tc.ln, 2*time.Second)
			if err != nil {
				t.Fatalf("inbound listener: %v", err)
			}
			ac.Close()
		})
	}
}
