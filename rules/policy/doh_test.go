package policy_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// catchAll proxies everything of the VM network: the config the DoH refusal must hold in.
const catchAll = `
[proxy.exit]
address = "192.0.2.1:1080"

[capture]
vm_networks = ["10.0.2.0/24"]

[dns]
doh_hosts = ["doh.corp.example", "*.resolvers.example", "192.0.2.153"]
%s

[[rule]]
name = "all"
action = "proxy"
`

// TestDoH: a caged flow to a DoH endpoint is refused by name (the flow's name, whatever
// gave it) or by address, the shipped list and the user's; an uncaged one is not; with
// allow_doh the rules decide again.
func TestDoH(t *testing.T) {
	on := compile(t, fmt.Sprintf(catchAll, ""))
	off := compile(t, fmt.Sprintf(catchAll, "allow_doh = true"))
	pool := netip.MustParseAddr("198.18.0.7")
	for _, c := range []struct {
		name string
		host string
		dst  string
		port uint16
		net  rules.Network
		doh  bool
	}{
		{"cloudflare by address", "", "1.1.1.1", 443, rules.TCP, true},
		{"cloudflare v6", "", "2606:4700:4700::1111", 443, rules.TCP, true},
		{"google by address, QUIC", "", "8.8.4.4", 443, rules.UDP, true},
		{"quad9 DoT", "", "9.9.9.9", 853, rules.TCP, true},
		{"firefox's cloudflare by fake IP", "mozilla.cloudflare-dns.com", pool.String(), 443, rules.TCP, true},
		{"dns.google by name, sniffed", "dns.google", "203.0.113.80", 443, rules.TCP, true},
		{"opendns by name", "doh.opendns.com", pool.String(), 443, rules.TCP, true},
		{"a nextdns profile", "abc123.dns.nextdns.io", pool.String(), 443, rules.TCP, true},
		{"the user's name", "doh.corp.example", pool.String(), 443, rules.TCP, true},
		{"the user's suffix", "eu.resolvers.example", pool.String(), 8443, rules.TCP, true},
		{"the user's address", "", "192.0.2.153", 443, rules.TCP, true},
		{"a web site", "example.com", pool.String(), 443, rules.TCP, false},
		{"a neighbour of 1.1.1.1", "", "1.1.1.4", 443, rules.TCP, false},
		{"DNS itself is the router's", "", "1.1.1.1", 53, rules.UDP, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := policy.Flow{Network: c.net, Src: netip.MustParseAddr("10.0.2.15"), Dst: netip.MustParseAddr(c.dst), Port: c.port, Host: c.host}
			d := on.Decide(&f)
			if got := d.Step == policy.StepDoH; got != c.doh || c.doh && d.Action != rules.Block {
				t.Errorf("refuse_doh: got %v %v by %q, want DoH %v", d.Step, d.Action, d.Name, c.doh)
			}
			if on.DoH(c.host, f.Dst) != c.doh && c.port != 53 {
				t.Errorf("DoH(%q, %v) = %v", c.host, f.Dst, !c.doh)
			}
			if d := off.Decide(&f); d.Step == policy.StepDoH {
				t.Errorf("allow_doh: still refused")
			}
			host := f
			host.Src = netip.MustParseAddr("192.168.1.10")
			if d := on.Decide(&host); d.Step == policy.StepDoH {
				t.Errorf("this host's own flow (not caged) was refused as DoH")
			}
			if c.doh {
				if why := on.Why(&f, d); why == "" || why == policy.StepDoH.String() {
					t.Errorf("Why = %q", why)
				}
			}
		})
	}
}

// BenchmarkDecideDoH is the cost of the DoH check in a caged flow's decision: the same
// catch-all config with the check and without (allow_doh).
func BenchmarkDecideDoH(b *testing.B) {
	for _, c := range []struct{ name, keys string }{{"refuse", ""}, {"allow", "allow_doh = true"}} {
		cfg, err := conf.Parse("b.toml", []byte(fmt.Sprintf(catchAll, c.keys)), conf.Options{SkipSecrets: true, OS: "linux"})
		if err != nil {
			b.Fatal(err)
		}
		p := policy.New(cfg, policy.Env{})
		f := policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("10.0.2.15"), Dst: netip.MustParseAddr("198.18.0.7"), Port: 443, Host: "registry.npmjs.org"}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				p.Decide(&f)
			}
		})
	}
}
