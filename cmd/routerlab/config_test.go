package main

import (
	"net/netip"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/conf/lint"
	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// parseLabConfig decodes labConfig as the router on the lab's Linux host does.
func parseLabConfig(t *testing.T) *conf.Config {
	t.Helper()
	cfg, err := conf.Parse("routerlab.toml", []byte(labConfig("/tmp/routerlab-test/control/control.sock")), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatalf("the lab's config does not decode: %v", err)
	}
	return cfg
}

// TestLabConfigLintsClean: `router lint` finds no error and no warning in the lab's config,
// judged on the lab's host namespace and on a host it knows nothing of.
func TestLabConfigLintsClean(t *testing.T) {
	cfg := parseLabConfig(t)
	labHost := lint.Host{
		Addrs: []netip.Addr{
			netip.MustParseAddr(lab.GatewayAddr), netip.MustParseAddr(lab.HostUplinkAddr), netip.MustParseAddr(lab.HostUplinkAddr6),
		},
		Prefixes: []netip.Prefix{
			netip.MustParsePrefix(lab.GuestNetwork), netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:100::/64"),
		},
		Name: "host",
		OS:   "linux",
	}
	for name, h := range map[string]lint.Host{"lab host": labHost, "unknown host": {OS: "linux"}} {
		for _, f := range lint.Check(cfg, h) {
			if f.Severity != lint.Note {
				t.Errorf("%s: line %d: %s: %s [%s]", name, f.Line, f.Severity, f.Message, f.Check)
			}
		}
	}
}

// TestLabConfigCages: the guest's flows (from its network, or from another address on the
// VM-facing link) go through the proxy, and the control socket is the one routerlab names.
func TestLabConfigCages(t *testing.T) {
	cfg := parseLabConfig(t)
	if got, want := cfg.Control.Socket, "/tmp/routerlab-test/control/control.sock"; got != want {
		t.Errorf("control socket %q, want %q", got, want)
	}
	pol := policy.New(cfg, policy.Env{})
	for _, f := range []policy.Flow{
		{Network: rules.TCP, Src: netip.MustParseAddr(lab.GuestAddr), Dst: netip.MustParseAddr("203.0.113.10"), Port: 80},
		{Network: rules.TCP, Src: netip.MustParseAddr(lab.UnlistedGuestAddr6), Dst: netip.MustParseAddr("2001:db8::1"), Port: 443, FromVM: true},
		{Network: rules.TCP, Owner: rules.Owner{App: "qemu-system-x86_64"}, Dst: netip.MustParseAddr("203.0.113.10"), Port: 443},
	} {
		if d := pol.Decide(&f); !d.Caged || d.Action != rules.Proxy || d.Proxy != "exit" {
			t.Errorf("%+v: %+v (caged %v), want caged and proxied via exit", f, d.Verdict, d.Caged)
		}
	}
}
