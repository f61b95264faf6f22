package replay

import (
	_ "embed"
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/rules/policy"
)

// allowList is the config in force in these tests: a guest network with an allow-list by
// name, telemetry blocked, the rest of the guest's traffic refused.
//
//go:embed testdata/allow-list.toml
var allowList string

func policyOf(t *testing.T, text string) *policy.Policy {
	t.Helper()
	cfg, err := conf.Parse("test.toml", []byte(text), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	return policy.New(cfg, policy.Env{Scoped: true})
}

// session is a recorded guest session: two registries carried, telemetry and an unknown
// name refused, a line of dropped records.
func session() []auditlog.Record {
	src := netip.MustParseAddrPort("10.0.2.15:40000")
	flow := func(event, name, from string) auditlog.Record {
		dst := netip.MustParseAddrPort("198.18.0.9:443") // a fake IP the router's DNS gave
		if from == "sni" {
			dst = netip.MustParseAddrPort("203.0.113.9:443") // an address the guest had
		}
		return auditlog.Record{Event: event, Network: "tcp", Src: src, Caged: true, Name: name, NameFrom: from, Dst: dst}
	}
	return []auditlog.Record{
		flow(auditlog.EventFlow, "registry.npmjs.org", "dns"),
		flow(auditlog.EventFlow, "registry.npmjs.org", "dns"),
		flow(auditlog.EventFlow, "files.pypi.org", "sni"),
		flow(auditlog.EventRefused, "telemetry.example", "dns"),
		flow(auditlog.EventRefused, "evil.example", "dns"),
		{Event: auditlog.EventDropped, Count: 3},
	}
}

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		new   string // the proposed config
		opens bool
		want  []string // "change new-rule: dests", one per group, in order
		same  int
	}{
		{"identical", allowList, false, nil, 5},
		{"narrowed: pypi dropped from the allow-list",
			strings.Replace(allowList, `, "*.pypi.org"`, "", 1), false,
			[]string{`refused #3 "vm": files.pypi.org:443`}, 4},
		{"widened: the guest's rest proxied instead of refused",
			strings.Replace(allowList, "name = \"vm\"\ncaged = true\naction = \"block\"", "name = \"vm\"\ncaged = true\naction = \"proxy\"\nproxy = \"exit\"", 1), true,
			[]string{`opened #3 "vm": evil.example:443`}, 4},
		{"moved: the registries through the backup",
			strings.Replace(allowList, "action = \"proxy\"\nproxy = \"exit\"", "action = \"proxy\"\nproxy = \"backup\"", 1), false,
			[]string{`moved #1 "registries": registry.npmjs.org:443 files.pypi.org:443`}, 2},
		{"opened: the registries direct, from the host's address",
			strings.Replace(allowList, "action = \"proxy\"\nproxy = \"exit\"", "ports = [\"443\"]\naction = \"direct\"", 1), true,
			[]string{`opened #1 "registries": registry.npmjs.org:443 files.pypi.org:443`}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := New(policyOf(t, allowList), policyOf(t, tc.new))
			for _, rec := range session() {
				d.Add(rec)
			}
			r := d.Report()
			var got []string
			for _, g := range r.Groups {
				var ds []string
				for _, x := range g.Dests {
					ds = append(ds, x.Name)
				}
				got = append(got, g.Kind+" "+g.New.Rule+": "+strings.Join(ds, " "))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("groups:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if r.Opens() != tc.opens || r.Same != tc.same || r.Flows != 5 || r.Skipped != 1 {
				t.Errorf("opens %v, same %d, flows %d, skipped %d; want opens %v, same %d, 5 flows, 1 skipped",
					r.Opens(), r.Same, r.Flows, r.Skipped, tc.opens, tc.same)
			}
		})
	}
}

// TestFlowOf: a record becomes the flow the capture saw; a sniffed name stays a sniffed
// name (a rule by name judges it as the data path would), a caged flow without an owner
// entered from a VM-facing side.
func TestFlowOf(t *testing.T) {
	f, ok := FlowOf(auditlog.Record{Event: auditlog.EventFlow, Network: "udp", Caged: true, Name: "x.test", NameFrom: "sni",
		Src: netip.MustParseAddrPort("10.0.5.2:1"), Dst: netip.MustParseAddrPort("203.0.113.7:443")})
	if !ok || f.Sniffed != "x.test" || f.Host != "" || !f.FromVM || f.Port != 443 || f.Dst != netip.MustParseAddr("203.0.113.7") || f.Network.String() != "udp" {
		t.Errorf("FlowOf = %+v, %v", f, ok)
	}
	f, _ = FlowOf(auditlog.Record{Event: auditlog.EventRefused, App: "qemu-system-x86_64", Caged: true, Name: "a.test", DstPort: 80})
	if f.FromVM || f.App != "qemu-system-x86_64" || f.Host != "a.test" || f.Port != 80 || f.Dst.IsValid() {
		t.Errorf("a process's flow: %+v", f)
	}
	if _, ok := FlowOf(auditlog.Record{Event: auditlog.EventDropped}); ok {
		t.Error("a dropped-records line is a flow")
	}
}
