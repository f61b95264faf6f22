//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/router/nftcap"
)

// tableBack polls (every 2 ms, up to limit) until the router's table exists in the host
// namespace again and returns how long that took from since; 0 when it did not come back.
func (s *scene) tableBack(since time.Time, limit time.Duration) time.Duration {
	s.t.Helper()
	for time.Since(since) < limit {
		var ok bool
		var err error
		if derr := s.lab.Host().Do(func() error { ok, err = nftcap.Installed("router"); return nil }); derr != nil {
			s.t.Fatal(derr)
		}
		if err != nil {
			s.t.Fatal(err)
		}
		if ok {
			return time.Since(since)
		}
		time.Sleep(2 * time.Millisecond) // not ordering: a 2 ms step, the precision of the time measured
	}
	return 0
}

// status is `router status --json` of the running router.
func (s *scene) status() control.Status {
	s.t.Helper()
	out, code := s.routerCmd("status", "--json", "--config", s.cfg)
	if code != 0 {
		s.t.Fatalf("router status: exit %d\n%s", code, out)
	}
	var st control.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		s.t.Fatalf("router status --json: %v\n%s", err, out)
	}
	return st
}

// TestGuardHeals: something else takes the router's table away while it runs (`nft flush
// ruleset`, a chain deleted): the router puts it back within a second, says so at error
// level and in `router status`, and the guest never leaves unproxied. `router cleanup`
// refuses while the router runs; with --force it stops the router (by the PID the router
// reports) and removes the guard.
func TestGuardHeals(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Fatalf("before: exit %d, %q; want the proxy's exit address", code, out)
	}

	for _, c := range []struct{ name, nft string }{
		{"flush ruleset", "flush ruleset\n"},
		{"delete the input chain", "flush chain inet router input\ndelete chain inet router input\n"},
	} {
		if err := s.lab.ResetLeaks(s.ctx); err != nil {
			t.Fatal(err)
		}
		cmd := s.lab.Host().Command(s.ctx, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(c.nft)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, out)
		}
		if c.name == "flush ruleset" {
			took := s.tableBack(start, 3*time.Second)
			if took == 0 || took > time.Second {
				t.Fatalf("%s: the table was not back within 1 s (took %v; 0 = not within 3 s)", c.name, took)
			}
			t.Logf("%s: table back after %v", c.name, took)
		}
		// The whole table, not only its name: every chain is there again.
		var out []byte
		var err error
		if !wait.Poll(time.Second, func() bool {
			out, err = s.lab.Host().Run(s.ctx, "nft", "list", "chain", "inet", "router", "input")
			return err == nil && strings.Contains(string(out), "goto vm_input")
		}) {
			t.Fatalf("%s: chain input not restored within 1 s: %v\n%s", c.name, err, out)
		}
		t.Logf("%s: input chain whole after %v", c.name, time.Since(start))
		s.lab.ResetLogs()
		if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
			t.Errorf("%s: the guest got exit %d, %q; want the proxy's exit address", c.name, code, out)
		}
		for _, r := range s.lab.HTTPLog() {
			if r.Remote.Addr().String() != lab.ExitAddr {
				t.Errorf("%s: the echo server heard %v", c.name, r)
			}
		}
		s.wantNoLeak(c.name)
	}
	s.waitLog("restored", time.Second)
	if !strings.Contains(s.log(), "level=ERROR msg=\"the guard's table was changed by someone else; restored\"") {
		t.Errorf("no error-level record of the restore in the log")
	}
	st := s.status()
	if st.Guard.Restores != 2 || st.Guard.LastRestore.IsZero() || !strings.Contains(st.Guard.LastDamage, "chain input") {
		t.Errorf("status guard = %+v; want 2 restores, the last for chain input", st.Guard)
	}
	if st.PID != s.router.PID() {
		t.Errorf("status pid = %d, want %d", st.PID, s.router.PID())
	}
	out, code := s.routerCmd("status", "--config", s.cfg)
	if code != 0 || !strings.Contains(out, "guard: restored 2 times") {
		t.Errorf("router status: exit %d\n%s", code, out)
	}

	// cleanup refuses while the router runs and leaves the guard.
	out, code = s.routerCmd("cleanup", "--config", s.cfg)
	if code == 0 || !strings.Contains(out, "a router is running") {
		t.Errorf("router cleanup while running: exit %d\n%s", code, out)
	}
	if s.tableBack(time.Now(), 100*time.Millisecond) == 0 {
		t.Fatal("the table is gone after a refused cleanup")
	}
	// --force stops the router by its PID, then removes the guard, and the router does not
	// put it back.
	out, code = s.routerCmd("cleanup", "--force", "--config", s.cfg)
	if code != 0 || !strings.Contains(out, "stopped the running router") {
		t.Fatalf("router cleanup --force: exit %d\n%s", code, out)
	}
	select {
	case <-s.router.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("the router still runs after cleanup --force")
	}
	if s.tableBack(time.Now(), 1500*time.Millisecond) != 0 {
		t.Error("the table is back after cleanup --force")
	}
}

// TestGuardWhileRunning: `router guard` while the router runs (`systemctl restart
// router-guard` after the config was edited, or by hand) leaves the running router's table
// alone: the router holds the cage by the config it runs, and a guard from another config
// put in its place (here one whose VM network is not the guest's) would capture what that
// config says, not what the router decides. The guest leaves through the proxy, and nothing
// had to be restored.
func TestGuardWhileRunning(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Fatalf("before: exit %d, %q; want the proxy's exit address", code, out)
	}
	text, err := os.ReadFile(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(t.TempDir(), "edited.toml")
	other := strings.Replace(string(text), `vm_networks = ["10.0.2.0/24"]`, `vm_networks = ["10.9.0.0/24"]`, 1)
	if other == string(text) {
		t.Fatal("the scene's config has no vm_networks line to edit")
	}
	if err := os.WriteFile(edited, []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := s.routerCmd("guard", "--config", edited)
	if code != 0 || !strings.Contains(out, "a router is running") {
		t.Fatalf("router guard while the router runs: exit %d\n%s", code, out)
	}
	s.lab.ResetLogs()
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("after router guard: exit %d, %q; want the proxy's exit address", code, out)
	}
	if st := s.status(); st.Guard.Restores != 0 {
		t.Errorf("status guard = %+v; want no restore (the guard left the router's table alone)", st.Guard)
	}
	s.wantNoLeak("after router guard")
}
