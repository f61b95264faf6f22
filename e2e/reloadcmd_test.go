//go:build linux

package e2e

import (
	"strings"
	"testing"

	"github.com/agentcage/router/internal/lab"
)

// TestReloadCommand: `router reload` (what systemctl reload runs) against the running
// router: a broken config makes it exit 1 with the config's error, the guest's traffic goes
// on under the running config, and `router status` shows the refusal; a good config makes
// it exit 0 and takes effect.
func TestReloadCommand(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	s.writeConfig(config(lab.GoSocksAddr, "") + "[[rule]]\nname = \"broken\"\naction = \"allow\"\n")
	out, code := s.routerCmd("reload", "--socket", s.controlPath())
	if code != 1 || !strings.Contains(out, `unknown action "allow"`) || !strings.Contains(out, s.cfg) {
		t.Fatalf("router reload of a broken file: exit %d\n%s\nwant 1 and the file's error", code, out)
	}
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Fatalf("after a refused reload: exit %d, %q", code, out)
	}
	out, code = s.routerCmd("status", "--socket", s.controlPath())
	if code != 0 || !strings.Contains(out, "last reload REFUSED") || !strings.Contains(out, `unknown action "allow"`) || !strings.Contains(out, "1 refused") {
		t.Errorf("status after a refused reload: exit %d\n%s", code, out)
	}
	s.writeConfig(strings.Replace(config(lab.GoSocksAddr, ""), "[[rule]]\nname = \"model-direct\"", "[[rule]]\nname = \"no-echo\"\nhosts = [\"203.0.113.10\"]\nports = [80]\naction = \"block\"\n\n[[rule]]\nname = \"model-direct\"", 1))
	if out, code := s.routerCmd("reload", "--socket", s.controlPath()); code != 0 || !strings.Contains(out, "reloaded (sha256 ") {
		t.Fatalf("router reload of a good file: exit %d\n%s", code, out)
	}
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL, "--max-time", "2"); gotThrough(out, code) {
		t.Errorf("after reloading a block rule, the guest's curl got through: %q", out)
	}
	s.wantNoLeak("reload command")
}
