package router

import (
	"net/netip"
	"testing"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
)

// TestChainCarriesTheFlow: a flow through [proxy.exit] via = "entry" reaches the target
// through both proxies: the router connects to the entry only, the entry is asked for the
// exit proxy by its name (never resolved here), the exit for the destination's name; with
// the entry down the flow is reset, never sent another way.
func TestChainCarriesTheFlow(t *testing.T) {
	target := startTarget(t, "two-hops\n")
	exit := startProxy(t, map[string]netip.Addr{"echo.lab.test": target.Addr()}, map[string]string{"agent": "pw-7"})
	entry := startProxy(t, map[string]netip.Addr{"exit.lab.test": netip.MustParseAddr("127.0.0.1")}, nil)
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{netip.MustParseAddr("198.18.0.7"): "echo.lab.test"}}
	pol := Settings{
		Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Proxy, Proxy: "exit"}),
		Upstreams: []UpstreamConfig{
			// The chained proxy first: the router builds its via before it, whatever the order.
			{Config: upstream.Config{Name: "exit", Host: "exit.lab.test", Port: exit.Addr.Port(), Username: "agent", Password: "pw-7", Via: "entry"}},
			{Config: upstream.Config{Name: "entry", Host: "127.0.0.1", Port: entry.Addr.Port()}},
		},
	}
	e := newEnv(t, pol, Options{Names: names})
	c := e.dial(netip.AddrPortFrom(netip.MustParseAddr("198.18.0.7"), target.Port()))
	if got := readN(t, c, 9); got != "two-hops\n" {
		t.Fatalf("banner = %q", got)
	}
	c.Close()
	if got := entry.Asked(); len(got) != 1 || got[0] != "exit.lab.test" {
		t.Errorf("the entry was asked for %q, want the exit proxy's name", got)
	}
	if got := exit.Asked(); len(got) != 1 || got[0] != "echo.lab.test" {
		t.Errorf("the exit was asked for %q, want the destination's name", got)
	}
	entry.Stop()
	c = e.dial(netip.AddrPortFrom(netip.MustParseAddr("198.18.0.7"), target.Port()))
	wantReset(t, c)
	if n := len(exit.Asked()); n != 1 {
		t.Errorf("the exit was asked %d times with the entry down", n)
	}
}

func TestChainOrderRefusesCycles(t *testing.T) {
	ups := []UpstreamConfig{
		{Config: upstream.Config{Name: "a", Via: "b"}},
		{Config: upstream.Config{Name: "b", Via: "a"}},
	}
	if _, err := chainOrder(ups); err == nil {
		t.Error("a cycle of vias was accepted")
	}
	ups[1].Via = "nosuch"
	if _, err := chainOrder(ups); err == nil {
		t.Error("an unknown via was accepted")
	}
}
