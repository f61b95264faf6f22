//go:build linux

package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/roottest"
)

// TestNonRootSaysWhatToDo: run as an unprivileged user (nobody, through setpriv), the
// commands that change the firewall say to run them with sudo or as the service, before
// they touch a config, the state directory or nftables; the commands that ask the daemon,
// given a control socket of root's (mode 0600), say the socket is root's, not that no
// router runs.
func TestNonRootSaysWhatToDo(t *testing.T) {
	roottest.Require(t, "setpriv")
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "router")
	b, err := os.ReadFile(routerBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "control.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chmod(sock, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "router.toml")
	if err := os.WriteFile(cfg, []byte(config("198.51.100.1:1080", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	asNobody := func(args ...string) (string, int) {
		cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", bin}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("setpriv %v: %v", args, err)
		}
		return string(out), code
	}
	const rootHint = "needs root: run it with sudo, or as the service (systemctl start router)"
	for _, args := range [][]string{
		{"run", "--config", cfg},
		{"run", "--config", "/nonexistent.toml"},
		{"guard", "--config", cfg},
		{"cleanup"},
		{"cleanup", "--config", cfg, "--force"},
	} {
		out, code := asNobody(args...)
		if want := "router " + args[0] + ": " + rootHint + "\n"; code != 2 || out != want {
			t.Errorf("%q as nobody: exit %d, %q; want exit 2 and %q", args, code, out, want)
		}
	}
	for _, args := range [][]string{
		{"status", "--socket", sock},
		{"reload", "--socket", sock},
		{"ask", "--socket", sock},
		{"console", "--socket", sock},
		{"profile", "--socket", sock, "vm", "default"},
		{"watch", "--once", "--socket", sock},
	} {
		out, code := asNobody(args...)
		if code != 1 || !strings.Contains(out, "permission denied (the control socket is root's: run it with sudo)") || strings.Contains(out, "is the router running") {
			t.Errorf("%q as nobody: exit %d, %q; want exit 1 and the socket is root's", args, code, out)
		}
	}
	if out, code := asNobody("lint", "--config", cfg); strings.Contains(out, "needs root") {
		t.Errorf("lint as nobody: exit %d, %q (it needs no privilege)", code, out)
	}
}
