package policy_test

import (
	"net/netip"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// TestInboundPorts: an inbound's exact address and port is open to caged flows like a
// forward's, its address is this host's even where Env does not say so, and the host's
// other ports stay closed, as does the inbound's port on any other address of the host.
func TestInboundPorts(t *testing.T) {
	cfg, err := conf.Parse("test.toml", []byte(`
[proxy.exit]
address = "192.0.2.1:1080"
[capture]
vm_networks = ["10.0.2.0/24"]
[[inbound]]
listen = "192.168.56.1:1080"
allow = ["192.168.56.0/24"]
[[rule]]
name = "vm"
caged = true
action = "proxy"
`), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	p := policy.New(cfg, policy.Env{})
	for _, tc := range []struct {
		dst  string
		want rules.Action
	}{
		{"192.168.56.1:1080", rules.Direct},
		{"192.168.56.1:22", rules.Block},
		{"127.0.0.1:1080", rules.Block},
	} {
		dst := netip.MustParseAddrPort(tc.dst)
		f := policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("10.0.2.15"), Dst: dst.Addr(), Port: dst.Port()}
		if d := p.Decide(&f); d.Step != policy.StepHost || d.Action != tc.want {
			t.Errorf("caged flow to %s: %v %v; want %v %v", tc.dst, d.Step, d.Action, policy.StepHost, tc.want)
		}
	}
}
