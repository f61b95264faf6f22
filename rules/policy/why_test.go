package policy

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
)

// TestWhyText: the answer to a guest's why query says the flow, each rule up to the
// deciding one (its name and the field that did not match, never the rule's values), the
// verdict, and for a refusal RefusalText's words; it is decided for the asking guest only.
func TestWhyText(t *testing.T) {
	host := func(h string) rules.Host {
		x, err := rules.ParseHost(h)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	cfg := &conf.Config{
		Capture: conf.Capture{VMNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24")}},
		DNS:     conf.DNS{Mode: conf.DNSFakeIP, Pool: netip.MustParsePrefix("198.18.0.0/15")},
		Rules: []rules.Rule{
			{Name: "secret-host-list", Action: rules.Proxy, Proxy: "exit", Hosts: []rules.Host{host("allowed.test")}, Ports: []rules.PortRange{{Lo: 443, Hi: 443}}},
			{Name: "no-plain-http", Action: rules.Block, Hosts: []rules.Host{host("allowed.test")}},
			{Name: "other-guest", Action: rules.Proxy, Proxy: "exit", Sources: []rules.IPRange{{Lo: netip.MustParseAddr("10.0.2.99"), Hi: netip.MustParseAddr("10.0.2.99")}}},
		},
	}
	p := New(cfg, Env{})
	guest := &Flow{Src: netip.MustParseAddr("10.0.2.15"), FromVM: true}
	for _, c := range []struct {
		host string
		port uint16
		want []string
	}{
		{"allowed.test", 80, []string{"tcp allowed.test:80 from 10.0.2.15 (caged)", `rule #1 "secret-host-list": no (ports)`, `rule #2 "no-plain-http": matches`, `verdict: block by rule #2 "no-plain-http"`, `refused by the router on the host: rule #2 "no-plain-http" blocks it`}},
		{"allowed.test", 443, []string{`rule #1 "secret-host-list": matches`, `verdict: proxy via exit by rule #1 "secret-host-list"`}},
		{"203.0.113.7", 22, []string{"tcp 203.0.113.7:22 from 10.0.2.15 (caged)", `rule #3 "other-guest": no (sources)`, "verdict: block by (caged: no rule decides)", "caged traffic, and no rule lets it out"}},
	} {
		out := strings.Join(p.WhyText(guest, c.host, c.port), "\n")
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s:%d: %q missing from\n%s", c.host, c.port, w, out)
			}
		}
		if strings.Contains(out, "allowed.test\"") || strings.Contains(out, "10.0.2.99") {
			t.Errorf("%s:%d: a rule's values in the answer:\n%s", c.host, c.port, out)
		}
	}
	other := &Flow{Src: netip.MustParseAddr("10.0.2.99"), FromVM: true}
	if out := strings.Join(p.WhyText(other, "203.0.113.7", 22), "\n"); !strings.Contains(out, `verdict: proxy via exit by rule #3 "other-guest"`) {
		t.Errorf("the other guest is decided as itself:\n%s", out)
	}
}
