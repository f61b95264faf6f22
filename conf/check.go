package conf

import (
	"net"
	"net/netip"
	"strconv"
	"time"
)

// This file holds the checks across keys, run once every table is decoded: whatever the
// daemon, the capture or the DNS server would refuse at start is refused here, with the line
// of the key at fault, so that `router lint` never passes a config `router run` refuses.

// specialRanges are IPv4 ranges no fake-IP pool may overlap: their addresses are local or
// never routed, and a fake IP among them would be taken for one (RFC 6890).
var specialRanges = [...]netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// Bounds of [dns] ttl: DNS carries whole seconds, and a fake answer older than an hour
// outlives any use.
const (
	minTTL = time.Second
	maxTTL = time.Hour
)

func (d *decoder) check(c *Config) {
	d.checkForwards(c)
	d.checkDNS(c)
	if len(c.Capture.Table) > 255 {
		d.fail(at{path: "capture.table"}, "table name is %d characters long; at most 255", len(c.Capture.Table))
	}
}

// checkForwards: a forward may not take the transparent listener's or the DNS server's port
// (they listen on every address), nor share its address and port with another forward. A
// forward that clashes with several earlier ones is reported once, with the first of them:
// the work and the messages stay linear in the number of forwards.
func (d *decoder) checkForwards(c *Config) {
	type firsts struct{ any, unspecified int } // 1-based forward numbers; 0: none yet
	byPort := map[uint16]*firsts{}
	byAddr := map[netip.AddrPort]int{}
	for i, f := range c.Forwards {
		if !f.Listen.IsValid() {
			continue
		}
		a := at{path: "forward[" + strconv.Itoa(i+1) + "].listen", where: "forward #" + strconv.Itoa(i+1) + ", listen"}
		switch f.Listen.Port() {
		case c.Capture.ListenerPort:
			d.fail(a, "port %d is [capture] listener_port, where the router listens on every address", f.Listen.Port())
		case c.Capture.DNSPort:
			d.fail(a, "port %d is [capture] dns_port, where the router listens on every address", f.Listen.Port())
		}
		p := byPort[f.Listen.Port()]
		if p == nil {
			p = &firsts{}
			byPort[f.Listen.Port()] = p
		}
		j := 0 // the first earlier forward this one clashes with
		if f.Listen.Addr().IsUnspecified() {
			j = p.any
		} else {
			j = byAddr[f.Listen]
			if u := p.unspecified; u > 0 && (j == 0 || u < j) {
				j = u
			}
		}
		if j > 0 {
			d.fail(a, "%s clashes with forward #%d (%s): two forwards cannot listen on one address and port", f.Listen, j, c.Forwards[j-1].Listen)
		}
		if p.any == 0 {
			p.any = i + 1
		}
		if p.unspecified == 0 && f.Listen.Addr().IsUnspecified() {
			p.unspecified = i + 1
		}
		if byAddr[f.Listen] == 0 {
			byAddr[f.Listen] = i + 1
		}
	}
}

// checkDNS: the pool must be usable and routable only to the router, the TTL whole seconds
// within bounds, the resolver a host and a port.
func (d *decoder) checkDNS(c *Config) {
	if c.DNS.Mode == DNSFakeIP && c.DNS.Pool.IsValid() {
		p := c.DNS.Pool
		pa := at{path: "dns.pool"}
		for _, sp := range specialRanges {
			if sp.Overlaps(p) {
				d.fail(pa, "the fake-IP pool %s overlaps %s (local or reserved addresses): pick unrouted space such as the default %s", p, sp, DefaultPool())
			}
		}
		for i, n := range c.Capture.VMNetworks {
			if n.Overlaps(p) {
				d.fail(pa, "the fake-IP pool %s overlaps vm_networks[%d] %s: a guest address would be taken for a fake IP", p, i+1, n)
			}
		}
		for i, f := range c.Forwards {
			for _, ap := range []netip.AddrPort{f.Listen, f.Connect} {
				if ap.IsValid() && p.Contains(ap.Addr()) {
					d.fail(pa, "the fake-IP pool %s holds %s of forward #%d", p, ap.Addr(), i+1)
				}
			}
		}
	}
	if ttl := c.DNS.TTL; ttl < minTTL || ttl > maxTTL || ttl%time.Second != 0 {
		d.fail(at{path: "dns.ttl"}, "%v: the TTL of fake answers is whole seconds from %v to %v", ttl, minTTL, maxTTL)
	}
	if r := c.DNS.Resolver; r != "" {
		host, port, err := net.SplitHostPort(r)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || n == 0 {
			d.fail(at{path: "dns.resolver"}, "%q is not host:port with a port from 1 to 65535 (e.g. \"1.1.1.1:53\")", r)
		}
	}
}
