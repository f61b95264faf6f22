package dns

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/agentcage/router/internal/ports"
)

// ParseResolvConf returns the nameserver addresses of a resolv.conf(5) file, in order, as
// "ip:53" address-port pairs (zones of link-local IPv6 servers kept), for
// Dialers.DirectResolver. Lines other than "nameserver" are ignored; a nameserver that is not
// an IP address is an error. On hosts with systemd-resolved, /etc/resolv.conf names the local
// stub (127.0.0.53); /run/systemd/resolve/resolv.conf names the real upstreams.
func ParseResolvConf(r io.Reader) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			return nil, fmt.Errorf("resolv.conf line %d: %w", n, err)
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), ports.DNS))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read resolv.conf: %w", err)
	}
	return out, nil
}
