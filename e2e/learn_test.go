//go:build linux

package e2e

import (
	"strings"
	"syscall"
	"testing"

	"github.com/agentcage/router/internal/lab"
)

// TestLearnSuggest: a session under the scene's catch-all rule, recorded in the flow log;
// `router learn --suggest` turns it into an allow-list that lint accepts and that, run as
// the config (the router started again on it), lets the same session through the proxy and
// refuses a new name and the address that came without one.
func TestLearnSuggest(t *testing.T) {
	cfg := config(lab.GoSocksAddr, "") + flowLogKeys
	if !strings.Contains(cfg, vmRule) {
		t.Fatal("the scene's config has no vm rule to replace")
	}
	s := newLab(t, cfg)
	s.startRouter()
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

	out, code := run(s.ctx, s.lab.Host(), routerBin, "learn", "--config", s.cfg)
	if code != 0 || !strings.Contains(out, lab.EchoName) || !strings.Contains(out, lab.ServiceAddr+" (no name)") {
		t.Fatalf("learn: exit %d\n%s", code, out)
	}
	suggested, code := run(s.ctx, s.lab.Host(), routerBin, "learn", "--config", s.cfg, "--suggest")
	if code != 0 || !strings.Contains(suggested, `hosts = ["`+lab.EchoName+`"]`) {
		t.Fatalf("learn --suggest: exit %d\n%s", code, suggested)
	}
	t.Logf("suggested:\n%s", suggested)

	s.stopRouter(syscall.SIGTERM)
	s.writeConfig(strings.Replace(cfg, vmRule, suggested, 1))
	if out, code := run(s.ctx, s.lab.Host(), routerBin, "lint", "--config", s.cfg); code != 0 {
		t.Fatalf("lint of the suggested config: exit %d\n%s", code, out)
	}
	s.startRouter()
	if out, code := s.curl(s.lab.Guest(), "http://"+lab.EchoName+"/"); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("the learned name under the allow-list: exit %d, %q", code, out)
	}
	if out, code := s.curl(s.lab.Guest(), "http://new.lab.test/", "--max-time", "3"); code == 0 {
		t.Errorf("a new name got through the allow-list: %q", out)
	}
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL, "--max-time", "3"); code == 0 {
		t.Errorf("the address without a name got through the allow-list: %q", out)
	}
	s.wantNoLeak("learned allow-list")
}
