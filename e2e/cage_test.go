//go:build linux

package e2e

import (
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
)

// routerCmd runs `router args...` in the host namespace with the lab's state directory
// (where the running router keeps its approved rules and a learning session's flow log)
// and returns its combined output and exit code. A router that did not run fails the test.
func (s *scene) routerCmd(args ...string) (string, int) {
	s.t.Helper()
	cmd, err := s.lab.RouterCommand(s.ctx, routerBin, args...)
	if err != nil {
		s.t.Fatal(err)
	}
	out, code := exitStatus(cmd.CombinedOutput())
	if code < 0 {
		s.t.Fatalf("router %s: %s", strings.Join(args, " "), out)
	}
	return out, code
}

// wantCaged checks from the outside that the guest gets nowhere but the model: its web
// request and its DNS fail, nothing leaves from the host's address, the echo server hears
// nobody.
func (s *scene) wantCaged(what string) {
	s.t.Helper()
	s.lab.ResetLogs()
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL, "--max-time", "3"); code == 0 {
		s.t.Errorf("%s: the guest fetched the echo page: %q", what, out)
	}
	if out, code := run(s.ctx, s.lab.Guest(), "dig", "+time=1", "+tries=1", "+short", "@"+lab.ServiceAddr, lab.EchoName); code == 0 && strings.TrimSpace(out) != "" {
		s.t.Errorf("%s: the guest resolved %s: %q", what, lab.EchoName, out)
	}
	if n := len(s.lab.HTTPLog()); n != 0 {
		s.t.Errorf("%s: the echo server heard %d requests", what, n)
	}
	for _, q := range s.lab.DNSLog() {
		s.t.Errorf("%s: the DNS server was asked by %v", what, q)
	}
	s.wantNoLeak(what)
}

// TestGuardAlone: `router guard` with no daemon closes the cage (the boot unit's job), and
// running it again changes nothing.
func TestGuardAlone(t *testing.T) {
	s := newLab(t, config(lab.GoSocksAddr, ""))
	// Before the guard, the hypervisor's NAT takes the guest out directly: the leak the
	// guard exists to stop.
	if _, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 {
		t.Fatal("the lab's NAT does not work without a router; the test would prove nothing")
	}
	out, code := s.routerCmd("guard", "--config", s.cfg)
	if code != 0 || !strings.Contains(out, "guard installed") {
		t.Fatalf("router guard: exit %d\n%s", code, out)
	}
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.wantCaged("guard alone")
	before := s.nftTable()
	if out, code := s.routerCmd("guard", "--config", s.cfg); code != 0 {
		t.Fatalf("router guard again: exit %d\n%s", code, out)
	}
	if after := s.nftTable(); after != before {
		t.Errorf("a second guard changed the table:\n%s\n---\n%s", before, after)
	}
	// The router takes the guard over.
	s.startRouter()
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("with the router: exit %d, %q; want the proxy's exit address", code, out)
	}
	s.wantNoLeak("router after the guard")
}

// nftTable is the router's table in the host namespace, without counters.
func (s *scene) nftTable() string {
	s.t.Helper()
	out, err := s.lab.Host().Run(s.ctx, "nft", "list", "table", "inet", "router")
	if err != nil {
		s.t.Fatal(err)
	}
	return counters.ReplaceAllString(string(out), "counter")
}

var counters = regexp.MustCompile(`counter packets \d+ bytes \d+`)

// TestFailedStartKeepsTheGuard: a router that cannot start (its proxy password is missing)
// leaves the guard in place and says so; a config that cannot be read at boot falls back to
// the last good guard.
func TestFailedStartKeepsTheGuard(t *testing.T) {
	cfg := config(lab.GoSocksAddr, "")
	s := newLab(t, strings.Replace(cfg, "[proxy.exit]\n", "[proxy.exit]\nusername = \"agent\"\npassword_env = \"ROUTER_E2E_NO_SUCH_VARIABLE\"\n", 1))
	if out, code := s.routerCmd("guard", "--config", s.cfg); code != 0 {
		t.Fatalf("router guard: exit %d\n%s", code, out)
	}
	os.Unsetenv("ROUTER_E2E_NO_SUCH_VARIABLE")
	out, code := s.routerCmd("run", "--config", s.cfg)
	if code == 0 || !strings.Contains(out, "the guard stays in place") {
		t.Fatalf("router run with a missing password: exit %d\n%s", code, out)
	}
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.wantCaged("after a failed start")

	// Boot with a broken config: the last good guard comes back.
	if out, code := s.routerCmd("cleanup", "--config", s.cfg); code != 0 {
		t.Fatalf("router cleanup: exit %d\n%s", code, out)
	}
	if err := os.WriteFile(s.cfg, []byte("[capture\nbroken"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = s.routerCmd("guard", "--config", s.cfg)
	if code != 0 || !strings.Contains(out, "installed the last good guard") {
		t.Fatalf("router guard with a broken config: exit %d\n%s", code, out)
	}
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.wantCaged("last good guard at boot")
}

// TestUnlistedGuestAddresses: the guest gives itself addresses outside vm_networks (another
// IPv4 subnet and an IPv6 prefix of the same link, routed by the host): they are caged by
// the VM-facing interface, refused rather than forwarded, while its listed address is
// proxied as before.
func TestUnlistedGuestAddresses(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	if err := s.lab.AddUnlistedGuestAddrs(s.ctx); err != nil {
		t.Fatal(err)
	}
	// The router derives the VM-facing interfaces when it installs: a reload sees the new
	// addresses' interface as it saw it at start (it carries 10.0.2.2 already).
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"unlisted IPv4", []string{"--interface", lab.UnlistedGuestAddr, lab.EchoURL}},
		{"unlisted IPv6", []string{"-6", "--interface", lab.UnlistedGuestAddr6, "http://[" + lab.InetUplinkAddr6 + "]/"}},
	} {
		out, code := run(s.ctx, s.lab.Guest(), "curl", append([]string{"-sS", "--max-time", "3"}, c.args...)...)
		if gotThrough(out, code) {
			t.Errorf("%s: the guest got through: %q", c.name, out)
		}
	}
	s.wantNoLeak("unlisted guest addresses")
	if n := len(s.lab.HTTPLog()); n != 0 {
		t.Errorf("the echo server heard %d requests from unlisted addresses", n)
	}
	s.waitLog("caged: no rule decides", 5*time.Second)
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("the listed address: exit %d, %q; want the proxy's exit address", code, out)
	}
}

// TestCatchAllDoesNotSwallowTheCage: with the VM's own rule removed, the only rule left that
// could take its flows is the bare direct catch-all, which is this host's alone: the guest's
// flow is refused (not sent direct) and lint reports the VM network without a way out.
func TestCatchAllDoesNotSwallowTheCage(t *testing.T) {
	cfg := strings.Replace(config(lab.GoSocksAddr, ""), "[[rule]]\nname = \"vm\"\nsources = [\"10.0.2.0/24\"]\naction = \"proxy\"\n", "", 1)
	if strings.Contains(cfg, `name = "vm"`) {
		t.Fatal("the VM rule is still in the config")
	}
	s := newScene(t, cfg)
	out, code := s.curl(s.lab.Guest(), lab.EchoURL)
	if gotThrough(out, code) {
		t.Errorf("the guest got through: %q", out)
	}
	s.wantNoLeak("bare catch-all")
	if n := len(s.lab.HTTPLog()); n != 0 {
		t.Errorf("the echo server heard %d requests", n)
	}
	s.waitLog("caged: no rule decides", 5*time.Second)
	lint, code := s.routerCmd("lint", "--config", s.cfg)
	if !strings.Contains(lint, "the VM network 10.0.2.0/24 has no way out") || !strings.Contains(lint, "[caged-no-way]") {
		t.Errorf("lint (exit %d) did not report the VM network:\n%s", code, lint)
	}
	s.stopRouter(syscall.SIGTERM)
}
