//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/router/control"
)

// refusedNamesConfig: a guest allowed the echo server by name only, telemetry blocked by
// name, the rest of the guest refused, and a budget of 20 names per domain and minute.
func refusedNamesConfig() string {
	return fmt.Sprintf(`
[proxy.exit]
address = %q

[capture]
vm_networks = ["10.0.2.0/24"]

[dns]
resolver = "203.0.113.10:53"

[budget]
names_per_domain = 20
window = "1m"

[[rule]]
name = "echo"
hosts = [%q, "*.tunnel.test"]
action = "proxy"

[[rule]]
name = "telemetry"
hosts = ["telemetry.lab.test"]
action = "block"

[[rule]]
name = "default"
action = "direct"
`, lab.GoSocksAddr, lab.EchoName)
}

// TestRefusedNamesAnswered: the guest's dig of a name every flow would be refused to prints
// NXDOMAIN with the Extended DNS Error that says which rule refused it; an allowed name gets
// a fake IP; a DNS-tunnel stand-in under an allowed domain is refused past the budget with
// its own EDE, while another domain is still answered; both refusals are counted.
func TestRefusedNamesAnswered(t *testing.T) {
	s := newScene(t, refusedNamesConfig())
	g := s.lab.Guest()
	dig := func(name string) string {
		out, _ := run(s.ctx, g, "dig", "+time=2", "+tries=1", "@"+lab.ServiceAddr, name)
		return out
	}
	for _, tc := range []struct{ name, want string }{
		{"telemetry.lab.test", `EDE: 15 (Blocked): (refused by the router on the host: rule #2 "telemetry" blocks it`},
		{"paste.example", `caged traffic, and no rule lets it out`},
	} {
		if out := dig(tc.name); !strings.Contains(out, "status: NXDOMAIN") || !strings.Contains(out, tc.want) {
			t.Errorf("dig %s: want NXDOMAIN with %q:\n%s", tc.name, tc.want, out)
		}
	}
	out, code := run(s.ctx, g, "dig", "+short", "+time=2", "+tries=1", "@"+lab.ServiceAddr, lab.EchoName)
	if a, err := netip.ParseAddr(strings.TrimSpace(out)); code != 0 || err != nil || !netip.MustParsePrefix("198.18.0.0/15").Contains(a) {
		t.Errorf("dig %s: exit %d, %q; want a fake IP", lab.EchoName, code, out)
	}
	refused := 0
	for i := range 30 {
		if out := dig(fmt.Sprintf("c%02d.tunnel.test", i)); strings.Contains(out, "status: NXDOMAIN") {
			refused++
			if !strings.Contains(out, "budget of 20 names under tunnel.test") {
				t.Errorf("the tunnel's name %d: NXDOMAIN without the budget's EDE:\n%s", i, out)
			}
		}
	}
	if refused != 10 {
		t.Errorf("%d of 30 tunnel names refused, want the 10 past the budget of 20", refused)
	}
	if out := dig(lab.EchoName); !strings.Contains(out, "status: NOERROR") {
		t.Errorf("another domain after the tunnel: want an answer:\n%s", out)
	}
	st := s.status()
	if n, _ := refusalCount(st, "budget"); n != 10 {
		t.Errorf("budget refusals counted: %d, want 10", n)
	}
	if n, _ := refusalCount(st, "rule"); n < 1 {
		t.Errorf("rule refusals counted: %d, want the blocked name", n)
	}
	shown := false // status shows the guest's names under the domain against the budget
	for _, b := range st.DomainBudgets {
		shown = shown || b.Budget == control.BudgetNames && b.Domain == "tunnel.test" && b.Used == 30 && b.Limit == 20 && b.Over
	}
	if !shown {
		t.Errorf("status: no names budget of 30 of 20 under tunnel.test: %+v", st.DomainBudgets)
	}
	s.wantNoLeak("guest DNS")
}
