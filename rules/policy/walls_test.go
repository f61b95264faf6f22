package policy_test

import (
	_ "embed"
	"net/netip"
	"testing"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestWallCases: the host walls decide the shared cases; a name is decided the same asked
// for by name (an inbound's client) and behind a fake IP (the transparent paths), and the
// policy asks for its addresses before it decides.
func TestWallCases(t *testing.T) {
	p := policy.New(parse(t, policytest.WallConfig), policytest.WallEnv())
	for _, c := range policytest.WallCases() {
		t.Run(c.Name, func(t *testing.T) {
			flows := []policy.Flow{c.Flow}
			if c.Flow.Host != "" {
				fake := c.Flow
				fake.Dst = policytest.PoolAddr
				flows = append(flows, fake)
				for _, f := range flows {
					f.Resolved = nil
					if !p.NeedsResolve(&f) {
						t.Errorf("%v: the policy does not ask what %q resolves to", f.Dst, f.Host)
					}
				}
			}
			for _, f := range flows {
				d := p.Decide(&f)
				if d.Step != c.Step || d.Action != c.Action || d.Proxy != c.Proxy || d.Name != c.Rule {
					t.Errorf("%v: got %v %v %q by %q, want %v %v %q by %q", f.Dst, d.Step, d.Action, d.Proxy, d.Name, c.Step, c.Action, c.Proxy, c.Rule)
				}
				if e, _ := p.Explain(&f); e != d {
					t.Errorf("Explain decided %+v, Decide %+v", e, d)
				}
				if p.Why(&f, d) == "" {
					t.Error("no reason")
				}
			}
		})
	}
}

// TestAnswerWall: the addresses a DNS answer may not give a caged client: those the walls
// refuse on every port.
func TestAnswerWall(t *testing.T) {
	p := policy.New(parse(t, policytest.WallConfig), policytest.WallEnv())
	for _, tc := range []struct {
		addr    string
		step    policy.Step
		refused bool
	}{
		{"203.0.113.5", policy.StepRule, false},
		{"10.0.2.2", policy.StepRule, false},  // the forward and the inbounds listen there
		{"127.0.0.1", policy.StepRule, false}, // the forward's target, for the process that carries a guest
		{"::1", policy.StepHost, true},
		{"0.0.0.0", policy.StepHost, true},
		{"169.254.169.254", policy.StepHost, true},
		{"198.51.100.2", policy.StepHost, true},
		{"10.0.4.15", policy.StepToGuest, true},
		{"10.0.4.40", policy.StepRule, false},  // a rule names it
		{"10.0.5.7", policy.StepToGuest, true}, // an inbound's guest
		{"10.0.6.7", policy.StepToGuest, true}, // a forward's guest
		{"10.0.5.1", policy.StepRule, false},   // the inbound listens there
	} {
		s, refused := p.AnswerWall(netip.MustParseAddr(tc.addr))
		if s != tc.step || refused != tc.refused {
			t.Errorf("%s: %v %v, want %v %v", tc.addr, s, refused, tc.step, tc.refused)
		}
	}
}

// vmInterfacesConfig has a VM-facing interface (tap*) beside the VM network, a direct rule
// naming one address of that interface's subnet, and the caged traffic through the proxy.
//
//go:embed testdata/vm-interfaces.toml
var vmInterfacesConfig string

// TestGuestNetOfInterface: the subnet of a VM-facing interface ([capture] vm_interfaces,
// known to the platform only) is a guest's network: refused to a caged flow unless a rule
// names the address; explain without the platform's knowledge does not know it.
func TestGuestNetOfInterface(t *testing.T) {
	var asked []string
	env := policytest.WallEnv()
	env.GuestNet = func(ifaces []string, a netip.Addr) bool {
		asked = ifaces
		return netip.MustParsePrefix("10.7.0.0/16").Contains(a)
	}
	p := policy.New(parse(t, vmInterfacesConfig), env)
	for _, tc := range []struct {
		dst  string
		step policy.Step
		rule string
	}{
		{"10.7.3.3:22", policy.StepToGuest, policy.StepToGuest.String()},
		{"10.7.0.40:80", policy.StepRule, "named"},
		{"203.0.113.5:80", policy.StepRule, "vm"},
	} {
		ap := netip.MustParseAddrPort(tc.dst)
		f := policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("10.0.2.15"), Dst: ap.Addr(), Port: ap.Port(), FromVM: true}
		if d := p.Decide(&f); d.Step != tc.step || d.Name != tc.rule {
			t.Errorf("%s: %v by %q, want %v by %q", tc.dst, d.Step, d.Name, tc.step, tc.rule)
		}
	}
	if len(asked) != 1 || asked[0] != "tap*" {
		t.Errorf("the platform was asked about interfaces %q, want [tap*]", asked)
	}
	if s, refused := p.AnswerWall(netip.MustParseAddr("10.7.3.3")); s != policy.StepToGuest || !refused {
		t.Errorf("AnswerWall(10.7.3.3) = %v %v, want a refusal to-guest", s, refused)
	}
}
