package conf

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentcage/router/rules"
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
	d.checkChains(c)
	d.checkForwards(c)
	d.checkMetrics(c)
	d.checkDNS(c)
	d.checkUDP(c)
	d.checkScope(c) // scope.go: what the capture of this OS can see
	if len(c.Capture.Table) > 255 {
		d.fail(at{path: "capture.table"}, "table name is %d characters long; at most 255", len(c.Capture.Table))
	}
}

// checkForwards: a forward or an inbound may not take the transparent listener's or the
// DNS server's port (they listen on every address), nor share its address and port with
// another forward or inbound. A listener that clashes with several earlier ones is reported
// once, with the first of them: the work and the messages stay linear in their number.
func (d *decoder) checkForwards(c *Config) {
	type listener struct {
		listen netip.AddrPort
		a      at
		what   string
	}
	ls := make([]listener, 0, len(c.Forwards)+len(c.Inbounds))
	for i, f := range c.Forwards {
		ls = append(ls, listener{f.Listen, at{path: "forward[" + strconv.Itoa(i+1) + "].listen", where: "forward #" + strconv.Itoa(i+1) + ", listen"}, "forward #" + strconv.Itoa(i+1)})
	}
	for i, in := range c.Inbounds {
		ls = append(ls, listener{in.Listen, at{path: "inbound[" + strconv.Itoa(i+1) + "].listen", where: "inbound #" + strconv.Itoa(i+1) + ", listen"}, "inbound #" + strconv.Itoa(i+1)})
	}
	type firsts struct{ any, unspecified int } // 1-based positions in ls; 0: none yet
	byPort := map[uint16]*firsts{}
	byAddr := map[netip.AddrPort]int{}
	for i, l := range ls {
		if !l.listen.IsValid() {
			continue
		}
		switch l.listen.Port() {
		case c.Capture.ListenerPort:
			d.fail(l.a, "port %d is [capture] listener_port, where the router listens on every address", l.listen.Port())
		case c.Capture.DNSPort:
			d.fail(l.a, "port %d is [capture] dns_port, where the router listens on every address", l.listen.Port())
		}
		p := byPort[l.listen.Port()]
		if p == nil {
			p = &firsts{}
			byPort[l.listen.Port()] = p
		}
		j := 0 // the first earlier listener this one clashes with
		if l.listen.Addr().IsUnspecified() {
			j = p.any
		} else {
			j = byAddr[l.listen]
			if u := p.unspecified; u > 0 && (j == 0 || u < j) {
				j = u
			}
		}
		if j > 0 {
			d.fail(l.a, "%s clashes with %s (%s): two listeners cannot share an address and port", l.listen, ls[j-1].what, ls[j-1].listen)
		}
		if p.any == 0 {
			p.any = i + 1
		}
		if p.unspecified == 0 && l.listen.Addr().IsUnspecified() {
			p.unspecified = i + 1
		}
		if byAddr[l.listen] == 0 {
			byAddr[l.listen] = i + 1
		}
	}
}

// checkMetrics: the metrics port is none of the router's other ports, whatever the
// addresses. The listener and DNS ports are taken on every address; and the Windows guard
// lets the caged apps reach a forward's listen port, and a loopback connect port, on every
// address of this machine, by port: metrics on such a port would be open to the guests.
func (d *decoder) checkMetrics(c *Config) {
	m := c.Metrics.Listen
	if !m.IsValid() {
		return
	}
	a := at{path: "metrics.listen"}
	port := m.Port()
	switch port {
	case c.Capture.ListenerPort:
		d.fail(a, "port %d is [capture] listener_port, where the router listens on every address", port)
	case c.Capture.DNSPort:
		d.fail(a, "port %d is [capture] dns_port, where the router listens on every address", port)
	}
	for i, f := range c.Forwards {
		switch {
		case port == f.Listen.Port():
			d.fail(a, "port %d is also the port of forward #%d (%s), which the guard opens to the VMs: give the metrics a port of their own", port, i+1, f.Listen)
		case port == f.Connect.Port() && f.Connect.Addr().IsLoopback():
			d.fail(a, "port %d is also the port forward #%d connects to (%s), which the guard opens to the VMs: give the metrics a port of their own", port, i+1, f.Connect)
		}
	}
	for i, in := range c.Inbounds {
		if port == in.Listen.Port() {
			d.fail(a, "port %d is also the port of inbound #%d (%s): give the metrics a port of their own", port, i+1, in.Listen)
		}
	}
}

// checkUDP: UDP goes through a proxy only by SOCKS5 UDP ASSOCIATE; a rule that names UDP and
// a proxy that cannot carry it, or DNS over UDP through such a proxy, cannot work.
func (d *decoder) checkUDP(c *Config) {
	for i, r := range c.Rules {
		if r.Network != rules.UDP || r.Action != rules.Proxy {
			continue
		}
		for _, n := range ProxyNames(r.Proxy) {
			if k, ok := d.proxies[n]; ok && !c.Proxies[k].CarriesUDP() {
				p := &c.Proxies[k]
				d.fail(at{path: "rule[" + strconv.Itoa(i+1) + "].proxy", where: "rule #" + strconv.Itoa(i+1) + " " + strconv.Quote(r.Name) + ", proxy"},
					"the rule takes UDP (network = \"udp\") but [proxy.%s] %s: use a socks5 proxy reached directly for it", n, p.noUDP())
			}
		}
	}
	if c.DNS.Transport == DNSOverUDP {
		if p, ok := c.Proxy(c.DNS.Proxy); ok && !p.CarriesUDP() {
			d.fail(at{path: "dns.transport"}, "DNS over UDP goes through [proxy.%s], which %s: use transport = \"tcp\"", p.Name, p.noUDP())
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
		for i, in := range c.Inbounds {
			if in.Listen.IsValid() && p.Contains(in.Listen.Addr()) {
				d.fail(pa, "the fake-IP pool %s holds %s of inbound #%d", p, in.Listen.Addr(), i+1)
			}
		}
	}
	if err := CheckTTL(c.DNS.TTL); err != nil {
		d.fail(at{path: "dns.ttl"}, "%v", err)
	}
	if r := c.DNS.Resolver; r != "" {
		if err := CheckResolver(r); err != nil {
			d.fail(at{path: "dns.resolver"}, "%v", err)
		}
	}
}

// noUDP says why p carries no UDP, for messages.
func (p *Proxy) noUDP() string {
	switch {
	case p.Type == ProxySOCKS4:
		return "is socks4, which carries TCP only"
	case p.Type != ProxySOCKS5:
		return "is " + p.Type + ", and HTTP CONNECT carries TCP only"
	}
	return "is reached through [proxy." + p.Via + "] (a chain), and a chain carries TCP only: the router does not nest UDP associations"
}

// checkChains: each via names another defined proxy, and following the vias from any
// proxy ends at one dialed directly, within MaxChain proxies: no cycle, no endless chain.
// A cycle is reported once per proxy on it.
func (d *decoder) checkChains(c *Config) {
	for i := range c.Proxies {
		p := &c.Proxies[i]
		if p.Via == "" {
			continue
		}
		a := at{path: "proxy." + p.Name + ".via"}
		if p.Via == p.Name {
			d.fail(a, "a proxy cannot be reached through itself")
			continue
		}
		if _, ok := d.proxies[p.Via]; !ok {
			d.fail(a, "no [proxy.%s] is defined%s", p.Via, d.known(c))
			continue
		}
		path := []string{p.Name}
		for cur := p; cur.Via != ""; {
			k, ok := d.proxies[cur.Via]
			if !ok {
				break // reported at that proxy
			}
			cur = &c.Proxies[k]
			if slices.Contains(path, cur.Name) {
				d.fail(a, "the chain comes back to itself: %s", strings.Join(append(path, cur.Name), " via "))
				break
			}
			path = append(path, cur.Name)
			if len(path) > MaxChain {
				d.fail(a, "the chain %s… is longer than %d proxies", strings.Join(path[:MaxChain], " via "), MaxChain)
				break
			}
		}
	}
}
