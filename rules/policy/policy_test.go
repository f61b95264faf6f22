package policy_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// parse parses text as a Linux config (vm_networks are Linux-only), whatever OS runs the
// test: the Windows test binary runs these cases under Wine too. An error fails t.
func parse(t *testing.T, text string) *conf.Config {
	t.Helper()
	cfg, err := conf.Parse("test.toml", []byte(text), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// compile is the policy of text (see parse) under the shared cases' environment.
func compile(t *testing.T, text string) *policy.Policy {
	t.Helper()
	env := policytest.Env()
	env.Scoped = false // the rules decide every flow handed over, as in the relay's tests
	return policy.New(parse(t, text), env)
}

func TestSharedCases(t *testing.T) {
	p := compile(t, policytest.Config)
	for _, c := range policytest.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			d := p.Decide(&c.Flow)
			if d.Step != c.Step || d.Action != c.Action || d.Proxy != c.Proxy || d.Name != c.Rule {
				t.Errorf("got %v %v %q by %q, want %v %v %q by %q", d.Step, d.Action, d.Proxy, d.Name, c.Step, c.Action, c.Proxy, c.Rule)
			}
			e, steps := p.Explain(&c.Flow)
			if e != d {
				t.Errorf("Explain decided %+v, Decide %+v", e, d)
			}
			if d.Step == policy.StepRule && (len(steps) == 0 || !steps[len(steps)-1].Match || steps[len(steps)-1].Name != c.Rule) {
				t.Errorf("steps %+v do not end with the deciding rule", steps)
			}
		})
	}
}

func TestLocal(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "0.1.2.3", "127.0.0.1", "127.255.255.254", "169.254.169.254", "224.0.0.1", "239.1.1.1",
		"255.255.255.255", "::", "::1", "fe80::1", "febf::1", "ff02::1", "ff0e::1", "::ffff:127.0.0.1"} {
		if !policy.IsLocal(netip.MustParseAddr(s)) {
			t.Errorf("IsLocal(%s) = false", s)
		}
	}
	for _, s := range []string{"1.1.1.1", "10.0.2.2", "192.168.1.1", "198.18.0.1", "255.255.255.254", "2001:db8::1", "fec0::1", "fc00::1"} {
		if policy.IsLocal(netip.MustParseAddr(s)) {
			t.Errorf("IsLocal(%s) = true", s)
		}
	}
	for _, p := range policy.LocalPrefixes() {
		if !policy.IsLocal(p.Addr()) {
			t.Errorf("LocalPrefixes has %v, IsLocal says no", p)
		}
	}
}

// A config whose only rule after the VM's is a bare direct catch-all: removing the VM's
// rule must not let VM traffic fall through to direct.
func TestCagedNeverFallsThrough(t *testing.T) {
	base := `
[proxy.exit]
address = "192.0.2.1:1080"
[capture]
vm_networks = ["10.0.2.0/24", "fd00:2::/64"]
`
	vmRule := `
[[rule]]
name = "vm"
sources = ["10.0.2.0/24", "fd00:2::/64"]
action = "proxy"
proxy = "exit"
`
	catchAll := `
[[rule]]
name = "default"
action = "direct"
`
	tcpOnly := `
[[rule]]
name = "tcp"
network = "tcp"
action = "direct"
`
	proxyAll := `
[[rule]]
name = "all"
action = "proxy"
`
	for _, tc := range []struct {
		name, text string
		src        string
		want       rules.Action
		step       policy.Step
	}{
		{"vm rule then catch-all, v4", base + vmRule + catchAll, "10.0.2.15", rules.Proxy, policy.StepRule},
		{"vm rule then catch-all, v6", base + vmRule + catchAll, "fd00:2::15", rules.Proxy, policy.StepRule},
		{"catch-all only, v4", base + catchAll, "10.0.2.15", rules.Block, policy.StepCaged},
		{"catch-all only, v6", base + catchAll, "fd00:2::15", rules.Block, policy.StepCaged},
		{"network-only rule is a catch-all", base + tcpOnly, "10.0.2.15", rules.Block, policy.StepCaged},
		{"no rules at all", base, "10.0.2.15", rules.Block, policy.StepCaged},
		{"a proxy catch-all keeps it caged", base + proxyAll + catchAll, "10.0.2.15", rules.Proxy, policy.StepRule},
		{"host source, catch-all", base + catchAll, "192.168.1.10", rules.Direct, policy.StepRule},
		{"host source, no rules", base, "192.168.1.10", rules.Direct, policy.StepNoMatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := compile(t, tc.text)
			ap := netip.MustParseAddrPort("[2001:db8::80]:443")
			if netip.MustParseAddr(tc.src).Is4() {
				ap = netip.MustParseAddrPort("198.51.100.1:443")
			}
			f := policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr(tc.src), Dst: ap.Addr(), Port: ap.Port()}
			d, steps := p.Explain(&f)
			if d.Action != tc.want || d.Step != tc.step {
				t.Fatalf("got %v by %v (%s), want %v by %v", d.Action, d.Step, d.Name, tc.want, tc.step)
			}
			if d.Step == policy.StepCaged {
				for _, s := range steps {
					if s.Match {
						t.Errorf("a step matched: %+v", s)
					}
				}
				if strings.Contains(tc.text, "default") && (len(steps) == 0 || steps[len(steps)-1].Field != "caged") {
					t.Errorf("the catch-all is not shown as skipped: %+v", steps)
				}
			}
		})
	}
}

// Final: a verdict decided without the name is final only when no host-name rule comes
// before the deciding rule.
func TestFinal(t *testing.T) {
	p := compile(t, `
[proxy.exit]
address = "192.0.2.1:1080"
[[rule]]
name = "by-ip"
hosts = ["198.51.100.0/24"]
action = "block"
[[rule]]
name = "by-name"
hosts = ["*.example.com"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`)
	for _, tc := range []struct {
		dst, host string
		final     bool
	}{
		{"198.51.100.1", "", true}, // by-ip comes before any name rule
		{"203.0.113.1", "", false}, // default: the name rule above could still match
		{"203.0.113.1", "a.example.com", true},
		{"203.0.113.1", "other.org", true},
	} {
		f := policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("192.168.1.10"), Dst: netip.MustParseAddr(tc.dst), Port: 443, Host: tc.host}
		if d := p.Decide(&f); d.Final != tc.final {
			t.Errorf("%s (%q): final %v, want %v (%+v)", tc.dst, tc.host, d.Final, tc.final, d)
		}
	}
}

func TestNeedsOwner(t *testing.T) {
	p := compile(t, policytest.Config)
	host := policy.Flow{Src: netip.MustParseAddr("192.168.1.10")}
	vmnet := policy.Flow{Src: netip.MustParseAddr("10.0.2.15")}
	vmif := policy.Flow{Src: netip.MustParseAddr("10.9.9.9"), FromVM: true}
	if !p.NeedsOwner(&host) || p.NeedsOwner(&vmnet) || p.NeedsOwner(&vmif) {
		t.Errorf("NeedsOwner host/vmnet/vmif = %v %v %v, want true false false", p.NeedsOwner(&host), p.NeedsOwner(&vmnet), p.NeedsOwner(&vmif))
	}
	plain := compile(t, "[[rule]]\nname = \"d\"\naction = \"direct\"\n")
	if plain.NeedsOwner(&host) {
		t.Error("no app rule, yet NeedsOwner")
	}
}

// A preset's apps are caged, and a caged = true rule takes caged flows only.
func TestPresetsAndCagedRules(t *testing.T) {
	cfg, err := conf.Parse("presets.toml", []byte(`
[proxy.exit]
address = "192.0.2.1:1080"
[capture]
hypervisors = ["qemu", "libvirt"]
local = true
[[rule]]
name = "cage"
caged = true
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	p := policy.New(cfg, policy.Env{})
	for _, tc := range []struct {
		name string
		f    policy.Flow
		want string
	}{
		{"qemu, a preset app", policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("192.168.1.10"), Dst: netip.MustParseAddr("198.51.100.1"), Port: 443, Owner: rules.Owner{App: "qemu-system-x86_64"}}, "cage"},
		{"libvirt's network", policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("192.168.122.50"), Dst: netip.MustParseAddr("198.51.100.1"), Port: 443}, "cage"},
		{"the host's browser", policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("192.168.1.10"), Dst: netip.MustParseAddr("198.51.100.1"), Port: 443, Owner: rules.Owner{App: "firefox"}}, "default"},
	} {
		if d := p.Decide(&tc.f); d.Name != tc.want {
			t.Errorf("%s: decided by %q, want %q", tc.name, d.Name, tc.want)
		}
	}
	if !p.NeedsOwner(&policy.Flow{Src: netip.MustParseAddr("192.168.1.10")}) {
		t.Error("preset apps are caged, yet the owner is not needed")
	}
	if got := cfg.Capture.VMInterfaces; len(got) != 1 || got[0] != "virbr0" {
		t.Errorf("interfaces %v, want libvirt's virbr0", got)
	}
}

// TestScopeCases: the DNS scope and local, in every combination Windows allows.
func TestScopeCases(t *testing.T) {
	for _, local := range []bool{true, false} {
		for _, dc := range []string{"", conf.DNSCaptureCaged, conf.DNSCaptureAll} {
			t.Run(fmt.Sprintf("local=%v,dns=%q", local, dc), func(t *testing.T) {
				cfg, err := conf.Parse("scope.toml", []byte(policytest.ScopeConfig(local, dc)), conf.Options{SkipSecrets: true, OS: "windows"})
				if err != nil {
					t.Fatal(err)
				}
				p := policy.New(cfg, policytest.Env())
				for _, c := range policytest.ScopeCases(local, dc) {
					d, _ := p.Explain(&c.Flow)
					if d.Step != c.Step || d.Action != c.Action || d.Proxy != c.Proxy || d.Name != c.Rule {
						t.Errorf("%s: got %v %v %q by %q, want %v %v %q by %q", c.Name, d.Step, d.Action, d.Proxy, d.Name, c.Step, c.Action, c.Proxy, c.Rule)
					}
					if why := p.Why(&c.Flow, d); why == "" || strings.HasPrefix(why, "step(") {
						t.Errorf("%s: no words for %v", c.Name, d.Step)
					}
				}
			})
		}
	}
}

// TestDecideICMP: an echo request leaves only when it is the host's own, its process known,
// and local = false.
func TestDecideICMP(t *testing.T) {
	for _, tc := range []struct {
		local bool
		app   string
		dst   string
		want  rules.Action
	}{
		{false, policytest.Chrome, "198.51.100.1", rules.Direct},
		{false, policytest.Hypervisor, "198.51.100.1", rules.Block},
		{false, "", "198.51.100.1", rules.Block},
		{true, policytest.Chrome, "198.51.100.1", rules.Block},
		{true, policytest.Chrome, "127.0.0.1", rules.Direct},
		{false, policytest.Hypervisor, "127.0.0.1", rules.Block},
	} {
		cfg, err := conf.Parse("icmp.toml", []byte(policytest.ScopeConfig(tc.local, "")), conf.Options{SkipSecrets: true, OS: "windows"})
		if err != nil {
			t.Fatal(err)
		}
		p := policy.New(cfg, policytest.Env())
		f := policy.Flow{Src: netip.MustParseAddr("192.168.1.10"), Dst: netip.MustParseAddr(tc.dst), Owner: rules.Owner{App: tc.app}}
		if d := p.DecideICMP(&f); d.Action != tc.want {
			t.Errorf("local=%v %q -> %s: %v (%v), want %v", tc.local, tc.app, tc.dst, d.Action, d.Step, tc.want)
		}
	}
}

// TestResolvedCases: a caged flow whose name leads back to this machine is refused when its
// way out connects from here, and the policy asks for the name's addresses exactly then.
func TestResolvedCases(t *testing.T) {
	p := compile(t, policytest.LocalProxyConfig)
	for _, c := range policytest.ResolvedCases() {
		t.Run(c.Name, func(t *testing.T) {
			d := p.Decide(&c.Flow)
			if d.Step != c.Step || d.Action != c.Action || d.Proxy != c.Proxy || d.Name != c.Rule {
				t.Errorf("got %v %v %q by %q, want %v %v %q by %q", d.Step, d.Action, d.Proxy, d.Name, c.Step, c.Action, c.Proxy, c.Rule)
			}
			if e, _ := p.Explain(&c.Flow); e != d {
				t.Errorf("Explain decided %+v, Decide %+v", e, d)
			}
			if d.Step == policy.StepHostName && !strings.Contains(p.Why(&c.Flow, d), c.Flow.Host) {
				t.Errorf("Why does not name the host: %s", p.Why(&c.Flow, d))
			}
			unresolved := c.Flow
			unresolved.Resolved = nil
			if got := p.NeedsResolve(&unresolved); got != c.NeedsResolve {
				t.Errorf("NeedsResolve = %v, want %v", got, c.NeedsResolve)
			}
			if p.NeedsResolve(&c.Flow) {
				t.Error("NeedsResolve asks again for a flow already resolved")
			}
			// Without the addresses the step never applies: what the rules say stands.
			if d := p.Decide(&unresolved); d.Step == policy.StepHostName {
				t.Errorf("unresolved flow refused by %v", d.Step)
			}
		})
	}
}

func TestProxyOnHost(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1080": true, "[::1]:1080": true, "0.0.0.0:1080": true, "localhost:1080": true, "tor.localhost:9050": true,
		"192.168.1.10:1080":   true, // one of the host's addresses (policytest.Env)
		"[fe80::1%eth0]:1080": true,
		"192.0.2.1:1080":      false, "proxy.example.net:1080": false, "localhost.example:1080": false,
	} {
		p := compile(t, "[proxy.up]\naddress = \""+strings.ReplaceAll(addr, "%eth0", "")+"\"\n")
		if got := p.ProxyOnHost("up"); got != want {
			t.Errorf("ProxyOnHost(%s) = %v, want %v", addr, got, want)
		}
	}
	if compile(t, policytest.LocalProxyConfig).ProxyOnHost("nope") {
		t.Error("an unknown proxy is on this host")
	}
	// A chain is on this host when any hop may be.
	chain := "[proxy.local]\naddress = \"127.0.0.1:1080\"\n[proxy.far]\naddress = \"192.0.2.1:1080\"\n" +
		"[proxy.exit]\naddress = \"198.51.100.9:1080\"\nvia = \"%s\"\n[dns]\nproxy = \"exit\"\n"
	if !compile(t, fmt.Sprintf(chain, "local")).ProxyOnHost("exit") {
		t.Error("a chain whose first hop is on this host is not")
	}
	if compile(t, fmt.Sprintf(chain, "far")).ProxyOnHost("exit") {
		t.Error("a chain of remote hops is on this host")
	}
}

// TestCagedAppsIsTheSet: the one caged-app set, as policytest names it, and every member of
// it decided as caged (a flow no rule names is refused), the direct rule's app not.
func TestCagedAppsIsTheSet(t *testing.T) {
	cfg, err := conf.Parse("caged.toml", []byte(policytest.CagedConfig), conf.Options{SkipSecrets: true, OS: "windows"})
	if err != nil {
		t.Fatal(err)
	}
	apps, services := policy.CagedApps(cfg)
	var names []string
	for _, a := range apps {
		names = append(names, a.App.String())
	}
	if !slices.Equal(names, policytest.CagedNames) || !slices.Equal(services, policytest.CagedServices) {
		t.Fatalf("caged apps %q, services %q; want %q, %q", names, services, policytest.CagedNames, policytest.CagedServices)
	}
	p := policy.New(cfg, policy.Env{})
	for _, name := range append(names[2:], "firefox.exe") {
		f := policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("192.168.1.10"), Dst: netip.MustParseAddr("203.0.113.7"), Port: 443, Owner: rules.Owner{App: name}}
		d := p.Decide(&f)
		if want := name != "firefox.exe"; d.Caged != want {
			t.Errorf("%s: caged %v, want %v (%+v)", name, d.Caged, want, d)
		}
	}
}

// TestNameCases: the allow-list by name, decided by the policy (the relay and explain run
// the same cases).
func TestNameCases(t *testing.T) {
	p := compile(t, policytest.NameConfig)
	if !p.AllowsByName() {
		t.Error("AllowsByName = false for an allow-list by name")
	}
	for _, c := range policytest.NameCases() {
		t.Run(c.Name, func(t *testing.T) {
			d := p.Decide(&c.Flow)
			if d.Step != c.Step || d.Action != c.Action || d.Proxy != c.Proxy || d.Name != c.Rule {
				t.Errorf("got %v %v %q by %q, want %v %v %q by %q", d.Step, d.Action, d.Proxy, d.Name, c.Step, c.Action, c.Proxy, c.Rule)
			}
			if n, _ := p.Name(&c.Flow); n != "" && !d.Final {
				t.Error("not final with the name known")
			}
			if want := c.Flow.Network == rules.TCP; p.NeedsSniff(&c.Flow) != want {
				t.Errorf("NeedsSniff = %v, want %v", !want, want)
			}
			if d.Step != policy.StepRule && p.Why(&c.Flow, d) == "" {
				t.Error("no reason for an implicit step")
			}
		})
	}
}

// TestNeedsSniff: only a caged TCP flow in a config whose caged rules name hosts waits for
// its first bytes; DNS, the host and the host's own flows never do.
func TestNeedsSniff(t *testing.T) {
	named := compile(t, policytest.NameConfig)
	plain := compile(t, policytest.Config) // no host-name rule
	guest := func(dst string, port uint16) *policy.Flow {
		return &policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("10.0.2.15"), Dst: netip.MustParseAddr(dst), Port: port}
	}
	host := &policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("192.168.1.10"), Dst: netip.MustParseAddr("203.0.113.7"), Port: 443, Owner: rules.Owner{App: "curl"}}
	for _, c := range []struct {
		name string
		p    *policy.Policy
		f    *policy.Flow
		want bool
	}{
		{"guest, names", named, guest("203.0.113.7", 443), true},
		{"guest, ssh, names", named, guest("203.0.113.7", 22), true},
		{"guest, no names", plain, guest("203.0.113.7", 443), false},
		{"guest, dns over tcp", named, guest("203.0.113.7", 53), false},
		{"guest, the host", named, guest("127.0.0.1", 8080), false},
		{"host's own", named, host, false},
	} {
		if got := c.p.NeedsSniff(c.f); got != c.want {
			t.Errorf("%s: NeedsSniff = %v, want %v", c.name, got, c.want)
		}
	}
	if plain.AllowsByName() {
		t.Error("AllowsByName for a config without host names")
	}
}

// TestNameMatchesNameOnly: a host-name entry matches a flow by its name only: the address
// a name was seen resolving to (Host from a DNS answer, proxy mode) loses to the name the
// client's bytes carry, and an address alone matches no name.
func TestNameMatchesNameOnly(t *testing.T) {
	p := compile(t, strings.Replace(policytest.NameConfig, `mode = "fake-ip"`, `mode = "proxy"`, 1))
	f := policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("10.0.2.15"), Dst: netip.MustParseAddr("203.0.113.7"), Port: 443, Host: "allowed.test"}
	if d := p.Decide(&f); d.Name != "allowed" {
		t.Errorf("name seen in DNS, nothing sniffed: %q, want allowed", d.Name)
	}
	f.Sniffed = "denied.test" // a CDN address that allowed.test resolved to, asked for another name
	if d := p.Decide(&f); d.Step != policy.StepCaged {
		t.Errorf("name seen in DNS, another sniffed: %v %q, want caged", d.Step, d.Name)
	}
	if n, sniffed := p.Name(&f); n != "denied.test" || !sniffed {
		t.Errorf("Name = %q %v", n, sniffed)
	}
}

// TestSniffedNameMeetsTheWalls: a name read from a flow's first bytes meets the host walls
// as a fake IP's does: through a proxy on this host, a sniffed name that resolves to
// loopback is refused, and the policy asks for its addresses first.
func TestSniffedNameMeetsTheWalls(t *testing.T) {
	p := compile(t, policytest.LocalProxyConfig)
	f := policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("10.0.2.15"), Dst: netip.MustParseAddr("203.0.113.7"), Port: 443, Sniffed: "loop.example"}
	if !p.NeedsSniff(&f) {
		t.Error("NeedsSniff = false under a config whose caged rules name hosts")
	}
	if !p.NeedsResolve(&f) {
		t.Error("NeedsResolve = false for a sniffed name through a proxy on this host")
	}
	f.Resolved = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	if d := p.Decide(&f); d.Step != policy.StepHostName {
		t.Errorf("sniffed name to loopback through the local proxy: %v %q, want %v", d.Step, d.Name, policy.StepHostName)
	} else if why := p.Why(&f, d); !strings.Contains(why, `"loop.example"`) {
		t.Errorf("Why does not name the sniffed name: %s", why)
	}
}
