package daemon

import (
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/rules/policy"
)

// dnsWhy answers a guest's why query (dns.Why, asked by `router check-ip --why` in the
// guest) with the running policy's decision for that guest: the source the query came from,
// judged as dnsNames judges it.
type dnsWhy struct{ d *daemon }

func (w dnsWhy) Why(src dns.Source, host string, port uint16) []string {
	p := w.d.r.Decision()
	f := policy.Flow{Src: src.Addr, Owner: src.Owner, FromVM: src.Addr.IsValid() && !p.Local(src.Addr)}
	return p.WhyText(&f, host, port)
}
