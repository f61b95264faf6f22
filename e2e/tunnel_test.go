//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/router/control"
)

// TestDNSTunnelBudget: a DNS-tunnel stand-in, 1,000 unique labels under one domain asked by
// one guest within a minute (one dig reading them from a file), against [budget]
// names_per_domain = 100: the first 100 get their fake IPs, the other 900 NXDOMAIN with the
// budget's Extended DNS Error, all inside the minute. Another domain from the same guest,
// and the same domain from the second guest, are still answered; status counts the guest's
// 1,000 names against the 100 and 900 refusals.
func TestDNSTunnelBudget(t *testing.T) {
	const labels, budget = 1000, 100
	s := newLab(t, twoGuestConfig(lab.GoSocksAddr, fmt.Sprintf("[budget]\nnames_per_domain = %d\nwindow = \"1m\"\n", budget)))
	guest2 := s.secondGuest()
	s.startRouter()

	names := filepath.Join(t.TempDir(), "names")
	var b strings.Builder
	for i := range labels {
		fmt.Fprintf(&b, "x%04d-7a3f9c.tunnel.lab.test A\n", i) // what a tunnel's chunks of data look like
	}
	if err := os.WriteFile(names, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, _ := run(s.ctx, s.lab.Guest(), "dig", "+time=2", "+tries=1", "+noall", "+comments", "@"+lab.ServiceAddr, "-f", names)
	took := time.Since(start)
	answered, refused := strings.Count(out, "status: NOERROR"), strings.Count(out, "status: NXDOMAIN")
	ede := strings.Count(out, fmt.Sprintf("budget of %d names under lab.test", budget))
	t.Logf("figure: %d labels under one domain in %v: %d answered, %d refused (%d with the budget's EDE)", labels, took.Round(time.Millisecond), answered, refused, ede)
	if answered != budget || refused != labels-budget || ede != refused {
		t.Errorf("%d answered and %d refused (%d with the budget's EDE), want %d and %d:\n%.2000s", answered, refused, ede, budget, labels-budget, out)
	}
	if took > time.Minute {
		t.Errorf("the tunnel's %d queries took %v: the stand-in must fit in the budget's minute", labels, took)
	}

	dig := func(ns *lab.Netns, name string) string {
		out, _ := run(s.ctx, ns, "dig", "+time=2", "+tries=1", "@"+lab.ServiceAddr, name)
		return out
	}
	if out := dig(s.lab.Guest(), "other.example"); !strings.Contains(out, "status: NOERROR") {
		t.Errorf("another domain from the same guest: want an answer:\n%s", out)
	}
	for i := range 10 {
		if out := dig(guest2, fmt.Sprintf("y%02d.tunnel.lab.test", i)); !strings.Contains(out, "status: NOERROR") {
			t.Errorf("the second guest under the same domain: want an answer:\n%s", out)
		}
	}

	st := s.status()
	if n, _ := refusalCount(st, "budget"); n != labels-budget {
		t.Errorf("budget refusals counted: %d, want %d", n, labels-budget)
	}
	shown := false
	for _, d := range st.DomainBudgets {
		shown = shown || d.Budget == control.BudgetNames && d.Domain == "lab.test" && d.Used == labels && d.Limit == budget && d.Over
	}
	if !shown {
		t.Errorf("status: no names budget of %d of %d under lab.test: %+v", labels, budget, st.DomainBudgets)
	}
	s.wantNoLeak("guest DNS")
}
