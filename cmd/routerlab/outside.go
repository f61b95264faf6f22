package main

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/agentcage/router/internal/lab"
)

// dnsAsker is one source address the internet's DNS server heard, with what it asked.
type dnsAsker struct {
	addr      netip.Addr
	questions []string // "name TYPE/transport", in order, without repeats
	count     int
}

// dnsReport says in words who asked the internet's DNS server what. leak is true when a
// query came from the host's own uplink address: the host resolved around the proxy.
func dnsReport(queries []lab.DNSQuery) (lines []string, leak bool) {
	var askers []*dnsAsker
	for _, q := range queries {
		addr := q.Source.Addr().Unmap()
		i := slices.IndexFunc(askers, func(a *dnsAsker) bool { return a.addr == addr })
		if i < 0 {
			askers = append(askers, &dnsAsker{addr: addr})
			i = len(askers) - 1
		}
		a := askers[i]
		a.count++
		question := fmt.Sprintf("%s %s/%s", strings.TrimSuffix(q.Name, "."), q.Type, q.Transport)
		if !slices.Contains(a.questions, question) {
			a.questions = append(a.questions, question)
		}
	}
	if len(askers) == 0 {
		return []string{"DNS server: no query reached it (the router answered every name from its fake-IP pool)"}, false
	}
	hostAsked := slices.ContainsFunc(askers, func(a *dnsAsker) bool { return isHostUplink(a.addr) })
	for _, a := range askers {
		what := fmt.Sprintf("DNS server: %s (%s)", plural(a.count, "query", "queries"), strings.Join(a.questions, ", "))
		switch {
		case a.addr.String() == lab.ExitAddr:
			why := "asked by the proxy's exit " + lab.ExitAddr + ": the router resolved through the proxy"
			if !hostAsked {
				why += ", the host's address never asked"
			}
			lines = append(lines, what+" "+why)
		case a.addr.String() == lab.ServiceAddr:
			lines = append(lines, what+" asked from inside the internet ("+lab.ServiceAddr+
				"): the proxy looking up a name the router handed it instead of an address")
		case isHostUplink(a.addr):
			leak = true
			lines = append(lines, what+" asked by the host's own address "+a.addr.String()+": a DNS leak")
		default:
			lines = append(lines, what+" asked by "+a.addr.String())
		}
	}
	return lines, leak
}

func isHostUplink(a netip.Addr) bool {
	return a.String() == lab.HostUplinkAddr || a.String() == lab.HostUplinkAddr6
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
