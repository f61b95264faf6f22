//go:build linux

package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
)

// TestNameBudgetAsk: with [budget] over = "ask", the guest's dig of its 21st name under a
// domain waits while `router ask` lists the question (the guest, the budget, the domain);
// answered once, the dig gets its fake IP and the guest's next new name there is answered
// unasked; under another domain, answered deny, the dig gets NXDOMAIN with the budget's
// Extended DNS Error.
func TestNameBudgetAsk(t *testing.T) {
	cfg := strings.Replace(fixture(t, "refused_names.toml"), `window = "1m"`, "window = \"1m\"\nover = \"ask\"", 1)
	cfg = strings.Replace(cfg, `"*.tunnel.test"]`, `"*.tunnel.test", "*.tunnel2.test"]`, 1)
	s := newScene(t, cfg)
	g := s.lab.Guest()
	dig := func(name string) string {
		out, _ := run(s.ctx, g, "dig", "+time=9", "+tries=1", "@"+lab.ServiceAddr, name)
		return out
	}
	routerAsk := func(args ...string) string {
		out, err := exec.CommandContext(s.ctx, routerBin, append([]string{"ask", "--socket", s.controlPath()}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("router ask %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	// pastBudget digs the 21st name under domain on a goroutine, waits for its question in
	// `router ask`, answers it and returns the dig's output.
	pastBudget := func(domain, answer string) string {
		for i := range 20 {
			if out := dig(fmt.Sprintf("c%02d.%s", i, domain)); !strings.Contains(out, "status: NOERROR") {
				t.Fatalf("name %d under %s, within the budget:\n%s", i, domain, out)
			}
		}
		done := make(chan string, 1)
		go func() { done <- dig("c20." + domain) }()
		var id string
		var list string
		_ = wait.Poll(8*time.Second, func() bool {
			list = routerAsk()
			for _, line := range strings.Split(list, "\n") {
				if f := strings.Fields(line); len(f) > 1 && f[1] == domain+":0" {
					id = f[0]
					return strings.Contains(line, "10.0.2.0/24") && strings.Contains(line, "budget names_per_domain") && strings.Contains(line, "past 20 under "+domain)
				}
			}
			return false
		})
		if id == "" {
			t.Fatalf("router ask lists no question about %s:\n%s", domain, list)
		}
		routerAsk("--id", id, "--answer", answer)
		select {
		case out := <-done:
			return out
		case <-time.After(15 * time.Second):
			t.Fatal("the dig did not end")
			return ""
		}
	}

	if out := pastBudget("tunnel.test", "once"); !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "198.18.") {
		t.Errorf("allowed: want a fake IP:\n%s", out)
	}
	if out := dig("c21.tunnel.test"); !strings.Contains(out, "status: NOERROR") {
		t.Errorf("the next new name after once: want it answered unasked:\n%s", out)
	}
	if out := pastBudget("tunnel2.test", "deny"); !strings.Contains(out, "status: NXDOMAIN") || !strings.Contains(out, "budget of 20 names under tunnel2.test") {
		t.Errorf("denied: want NXDOMAIN with the budget's EDE:\n%s", out)
	}
	if list := routerAsk(); !strings.Contains(list, "nothing is asked") {
		t.Errorf("questions left:\n%s", list)
	}
}
