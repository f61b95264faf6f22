package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/lab"
)

func query(src, name, typ, transport string) lab.DNSQuery {
	return lab.DNSQuery{Source: netip.MustParseAddrPort(src), Name: name, Type: typ, Transport: transport}
}

func TestDNSReportProxyResolved(t *testing.T) {
	lines, leak := dnsReport([]lab.DNSQuery{
		query("203.0.113.10:40000", "echo.lab.test.", "A", "udp"),
		query("203.0.113.50:40001", "whoami.lab.test.", "TXT", "tcp"),
		query("203.0.113.50:40002", "whoami.lab.test.", "TXT", "tcp"),
	})
	if leak || len(lines) != 2 {
		t.Fatalf("leak %v, lines:\n%s", leak, strings.Join(lines, "\n"))
	}
	if want := "DNS server: 2 queries (whoami.lab.test TXT/tcp) asked by the proxy's exit 203.0.113.50: the router resolved through the proxy, the host's address never asked"; lines[1] != want {
		t.Errorf("got  %s\nwant %s", lines[1], want)
	}
	if !strings.Contains(lines[0], "1 query (echo.lab.test A/udp) asked from inside the internet") {
		t.Errorf("the proxy's own lookup: %s", lines[0])
	}
}

func TestDNSReportHostLeak(t *testing.T) {
	lines, leak := dnsReport([]lab.DNSQuery{
		query("203.0.113.50:40001", "whoami.lab.test.", "TXT", "tcp"),
		query("[2001:db8:100::2]:53000", "echo.lab.test.", "AAAA", "udp"),
	})
	if !leak {
		t.Error("a query from the host's uplink address is a leak")
	}
	if strings.Contains(lines[0], "never asked") {
		t.Errorf("the host did ask: %s", lines[0])
	}
	if !strings.Contains(lines[1], "host's own address 2001:db8:100::2: a DNS leak") {
		t.Errorf("the leak line: %s", lines[1])
	}
}

func TestDNSReportNothing(t *testing.T) {
	lines, leak := dnsReport(nil)
	if leak || len(lines) != 1 || !strings.Contains(lines[0], "no query reached it") {
		t.Errorf("leak %v, lines %q", leak, lines)
	}
}
