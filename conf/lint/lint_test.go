package lint

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

func parse(t *testing.T, src string) *conf.Config {
	t.Helper()
	cfg, err := conf.Parse("t.toml", []byte(src), conf.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// short renders findings as "severity check rule<other" for comparison.
func short(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		s := string(f.Severity) + " " + f.Check + " " + f.Rule
		if f.Other != "" {
			s += "<" + f.Other
		}
		out = append(out, s)
	}
	return out
}

// header is the config the rule tests run under: the rules are judged as Windows would
// take them (the app names are Windows'), and the VM network's own checks (a way out) are
// tested apart, in TestCage.
const header = `
[proxy.exit]
address = "198.51.100.1:1080"
[capture]
local = true
`

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		rules string
		want  []string
	}{
		{"spec example order is clean", `
[[forward]]
name = "model"
listen = "192.168.56.1:47831"
connect = "127.0.0.1:47831"
allow = ["192.168.56.0/24"]
[[rule]]
name = "model-direct"
hosts = ["10.0.2.2", "127.0.0.1", "localhost", "192.168.56.0/24"]
ports = ["47831"]
action = "direct"
[[rule]]
name = "hypervisor"
apps = ["VirtualBoxVM.exe", "VBoxHeadless.exe", "vmnat.exe", "qemu-system-*"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, nil},
		{"the trap: hypervisor rule above the model rule", `
[[forward]]
name = "model"
listen = "192.168.56.1:47831"
connect = "127.0.0.1:47831"
allow = ["192.168.56.0/24"]
[[rule]]
name = "hypervisor"
apps = ["VirtualBoxVM.exe", "svchost.exe"]
action = "proxy"
[[rule]]
name = "model-direct"
hosts = ["10.0.2.2", "127.0.0.1"]
ports = ["47831"]
action = "direct"
[[rule]]
name = "default"
action = "direct"
`, []string{"error local-via-proxy model-direct<hypervisor", "error svchost-app "}},
		{"the trap with the model rule limited to svchost: unreachable", `
[[forward]]
name = "model"
listen = "192.168.56.1:47831"
connect = "127.0.0.1:47831"
allow = ["192.168.56.0/24"]
[[rule]]
name = "hypervisor"
apps = ["VirtualBoxVM.exe", "svchost.exe"]
action = "proxy"
[[rule]]
name = "model-direct"
apps = ["SVCHOST.EXE"]
hosts = ["10.0.2.2", "127.0.0.1"]
ports = ["47831"]
action = "direct"
[[rule]]
name = "default"
action = "direct"
`, []string{"error unreachable model-direct<hypervisor", "error svchost-app "}},
		{"rule below a catch-all", `
[[rule]]
name = "all"
action = "proxy"
[[rule]]
name = "late"
ports = [443]
action = "direct"
`, []string{"error unreachable late<all", "warning no-catch-all "}},
		{"covered by two rules together (ports)", `
[[rule]]
name = "low"
ports = ["1-1000"]
action = "block"
[[rule]]
name = "high"
ports = ["1001-65535"]
action = "proxy"
[[rule]]
name = "web"
ports = [443]
hosts = ["203.0.113.0/24"]
action = "direct"
[[rule]]
name = "default"
action = "direct"
`, []string{"error unreachable web<low", "error unreachable default<low"}},
		{"covered by two rules together (network, sources)", `
[[rule]]
name = "tcp-vm"
network = "tcp"
sources = ["10.0.2.0/25"]
action = "proxy"
[[rule]]
name = "tcp-vm2"
network = "tcp"
sources = ["10.0.2.128/25"]
action = "proxy"
[[rule]]
name = "udp"
network = "udp"
action = "block"
[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "direct"
[[rule]]
name = "default"
action = "direct"
`, []string{"error unreachable vm<tcp-vm"}},
		{"glob covers glob", `
[[rule]]
name = "qemu"
apps = ["qemu-*"]
action = "proxy"
[[rule]]
name = "qemu-system"
apps = ["qemu-system-*"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, []string{"error unreachable qemu-system<qemu"}},
		{"an apps rule does not cover flows without a process", `
[[rule]]
name = "anyapp"
apps = ["*"]
action = "proxy"
[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "block"
[[rule]]
name = "default"
action = "direct"
`, []string{"warning partly-shadowed vm<anyapp"}},
		{"names are not addresses", `
[[rule]]
name = "ips"
hosts = ["203.0.113.0/24"]
action = "block"
[[rule]]
name = "names"
hosts = ["*.openai.com"]
action = "direct"
[[rule]]
name = "sub"
hosts = ["api.openai.com"]
action = "direct"
[[rule]]
name = "default"
action = "direct"
`, []string{"error unreachable sub<names"}},
		{"proxy rule naming local destinations", `
[[rule]]
name = "oops"
hosts = ["127.0.0.1", "203.0.113.10", "fe80::/10", "db.localhost"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, []string{"error local-via-proxy oops"}},
		{"partly shadowed by an origin-wide rule", `
[[rule]]
name = "hypervisor"
apps = ["VBoxHeadless.exe"]
action = "proxy"
[[rule]]
name = "openai-direct"
hosts = ["*.openai.com"]
action = "direct"
[[rule]]
name = "default"
action = "direct"
`, []string{"warning partly-shadowed openai-direct<hypervisor"}},
		{"a disabled rule takes nothing", `
[[rule]]
name = "off"
ports = [443]
action = "block"
enabled = false
[[rule]]
name = "web"
ports = [443]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
[[rule]]
name = "after-default"
action = "block"
enabled = false
`, []string{"note disabled off", "note disabled after-default"}},
		{"a rule that names DoH resolvers", `
[[rule]]
name = "resolvers"
hosts = ["dns.google", "9.9.9.9", "example.com"]
action = "proxy"
[[rule]]
name = "no-doh"
hosts = ["1.1.1.1"]
action = "block"
[[rule]]
name = "default"
action = "direct"
`, []string{"warning doh-endpoint resolvers"}},
		{"exception first is fine", `
[[rule]]
name = "no-quic"
network = "udp"
ports = [443]
action = "block"
[[rule]]
name = "hypervisor"
apps = ["VBoxHeadless.exe"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := short(Check(parse(t, header+tt.rules), Host{OS: "windows"}))
			if !slices.Equal(got, tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestCheckConfigLevel(t *testing.T) {
	src := `
[proxy.a]
address = "198.51.100.1:1080"
[proxy.b]
address = "198.51.100.1:1081"
[dns]
proxy = "a"
[[forward]]
name = "model"
listen = "0.0.0.0:47831"
connect = "127.0.0.1:47831"
allow = ["10.0.2.0/24"]
unsafe_any_address = true
[metrics]
listen = "0.0.0.0:9477"
unsafe_listen = true
[[rule]]
name = "to-host"
hosts = ["192.168.1.20"]
action = "proxy"
proxy = "a"
[[rule]]
name = "default"
action = "direct"
`
	got := short(Check(parse(t, src), Host{Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.20")}}))
	want := []string{"error local-via-proxy to-host", "error forward-any model", "warning metrics-open ", "error unused-proxy b", "warning nothing-captured "}
	if !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// TestForwardRaw: a raw TCP forward is a warning; the default (HTTP) forward is not.
func TestForwardRaw(t *testing.T) {
	src := `
[[forward]]
name = "raw"
listen = "10.0.2.2:47831"
connect = "127.0.0.1:47831"
allow = ["10.0.2.0/24"]
api = "tcp"
[[forward]]
name = "http"
listen = "10.0.2.2:47832"
connect = "127.0.0.1:47832"
allow = ["10.0.2.0/24"]
[[rule]]
name = "default"
action = "direct"
`
	var got []string
	for _, f := range short(Check(parse(t, src), Host{})) {
		if strings.Contains(f, "forward") {
			got = append(got, f)
		}
	}
	if want := []string{"warning forward-raw raw"}; !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestTrapFileNamesTheModelRule(t *testing.T) {
	cfg, err := conf.Load("../../testdata/conf/trap.toml", conf.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	fs := Check(cfg, Host{})
	if !HasErrors(fs) {
		t.Fatalf("no error: %+v", fs)
	}
	f := fs[0]
	if f.Rule != "model-direct" || f.Other != "hypervisor" || f.Line != 13 || !strings.Contains(f.Message, "127.0.0.1") || !strings.Contains(f.Fix, `move "model-direct" above "hypervisor"`) {
		t.Errorf("finding = %+v", f)
	}
}

// TestNeverCallsAReachableRuleUnreachable: for random rule lists and flows, a rule that
// decides some flow must never be reported unreachable (lint may miss shadowing, but must
// not invent it).
func TestNeverCallsAReachableRuleUnreachable(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 3))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	for set := range 400 {
		var b strings.Builder
		b.WriteString(header)
		n := 2 + r.IntN(8)
		for i := range n {
			fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\naction = %q\n", i, pick("direct", "block", "proxy"))
			if r.IntN(3) == 0 {
				fmt.Fprintf(&b, "network = %q\n", pick("tcp", "udp"))
			}
			if r.IntN(3) == 0 {
				fmt.Fprintf(&b, "sources = [%q]\n", pick("10.0.2.0/24", "10.0.2.0/25", "10.0.2.128/25", "10.0.3.0/24"))
			}
			if r.IntN(2) == 0 {
				fmt.Fprintf(&b, "hosts = [%q]\n", pick("203.0.113.0/24", "203.0.113.0/25", "203.0.113.7", "a.test", "*.test", "*.a.test", "203.0.113.5-203.0.113.200"))
			}
			if r.IntN(2) == 0 {
				fmt.Fprintf(&b, "ports = [%q]\n", pick("80", "443", "1-500", "400-65535", "1-65535"))
			}
			if r.IntN(3) == 0 {
				fmt.Fprintf(&b, "apps = [%q]\n", pick("qemu-*", "qemu-system-*", "curl", "*", "*.exe", "vbox.exe"))
			}
			if r.IntN(5) == 0 {
				fmt.Fprintf(&b, "services = [%q]\n", pick("iphlpsvc", "bfe"))
			}
			if r.IntN(6) == 0 {
				b.WriteString("caged = true\n")
			}
			if r.IntN(7) == 0 {
				b.WriteString("enabled = false\n")
			}
		}
		cfg := parse(t, b.String())
		pol := policy.New(cfg, policy.Env{})
		unreachable := map[string]bool{}
		for _, f := range Check(cfg, Host{}) {
			if f.Check == CheckUnreachable {
				unreachable[f.Rule] = true
			}
		}
		for range 2000 {
			q := &rules.Query{
				Network: rules.Network(1 + r.IntN(2)),
				Src:     netip.AddrFrom4([4]byte{10, 0, byte(2 + r.IntN(2)), byte(r.IntN(256))}),
				Dst:     netip.AddrFrom4([4]byte{203, 0, 113, byte(r.IntN(256))}),
				Port:    uint16(1 + r.IntN(1000)),
			}
			if r.IntN(2) == 0 {
				q.Host = pick("a.test", "b.a.test", "x.test", "other.org")
			}
			if r.IntN(2) == 0 {
				q.App = pick("qemu-system-x86_64", "qemu-img", "curl", "vbox.exe", "x.exe")
			}
			if r.IntN(3) == 0 {
				q.Services = []string{pick("iphlpsvc", "bfe", "dnscache")}
			}
			f := policy.Flow{Network: q.Network, Src: q.Src, Dst: q.Dst, Port: q.Port, Host: q.Host, Owner: rules.Owner{App: q.App, Services: q.Services}, FromVM: r.IntN(4) == 0}
			v := pol.Decide(&f)
			if v.Index >= 0 && unreachable[v.Name] {
				t.Fatalf("seed %d set %d: %s decides %+v but lint calls it unreachable\n%s", seed, set, v.Name, f, b.String())
			}
		}
	}
}
