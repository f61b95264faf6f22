//go:build linux

package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
)

// TestLearnSuggest: a learning session (`router run --learn`) on a config with no rule for
// the guest (every caged flow would be refused) lets the guest through the proxy and
// records it in the flow log (flows.jsonl in the state directory, the session's default); `router
// learn --suggest` turns it into an allow-list that lint accepts and that, run as the config
// (the router started again on it, not learning), lets the same session through the proxy
// and refuses a new name and the address that came without one.
func TestLearnSuggest(t *testing.T) {
	full := config(lab.GoSocksAddr, "")
	if !strings.Contains(full, vmRule) {
		t.Fatal("the scene's config has no vm rule to replace")
	}
	cfg := strings.Replace(full, vmRule, "", 1)
	s := newLab(t, cfg)
	r, err := s.lab.StartRouterWith(routerBin, s.cfg, 15*time.Second, "--learn")
	if err != nil {
		t.Fatal(err)
	}
	s.router = r
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if out, code := s.curl(s.lab.Guest(), "http://"+lab.EchoName+"/"); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
			t.Fatalf("the session by name: exit %d, %q", code, out)
		}
	}
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 {
		t.Fatalf("the session by address: exit %d, %q", code, out)
	}
	s.flowRecords(func(m map[string]any) bool {
		return m["event"] == "flow" && m["caged"] == true && m["name"] == lab.EchoName
	})
	s.flowRecords(func(m map[string]any) bool {
		return m["event"] == "flow" && m["caged"] == true && m["dst"] == lab.ServiceAddr+":80"
	})

	out, code := s.routerCmd("learn", "--config", s.cfg)
	if code != 0 || !strings.Contains(out, lab.EchoName) || !strings.Contains(out, lab.ServiceAddr+" (no name)") {
		t.Fatalf("learn: exit %d\n%s", code, out)
	}
	suggested, code := s.routerCmd("learn", "--config", s.cfg, "--suggest")
	if code != 0 || !strings.Contains(suggested, `hosts = ["`+lab.EchoName+`"]`) {
		t.Fatalf("learn --suggest: exit %d\n%s", code, suggested)
	}
	t.Logf("suggested:\n%s", suggested)

	s.stopRouter(syscall.SIGTERM)
	s.writeConfig(strings.Replace(full, vmRule, suggested, 1)) // in place of the catch-all
	if out, code := run(s.ctx, s.lab.Host(), routerBin, "lint", "--config", s.cfg); code != 0 {
		t.Fatalf("lint of the suggested config: exit %d\n%s", code, out)
	}
	s.startRouter()
	if out, code := s.curl(s.lab.Guest(), "http://"+lab.EchoName+"/"); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("the learned name under the allow-list: exit %d, %q", code, out)
	}
	if out, code := s.curl(s.lab.Guest(), "http://new.lab.test/", "--max-time", "3"); gotThrough(out, code) {
		t.Errorf("a new name got through the allow-list: %q", out)
	}
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL, "--max-time", "3"); gotThrough(out, code) {
		t.Errorf("the address without a name got through the allow-list: %q", out)
	}
	s.wantNoLeak("learned allow-list")
}
