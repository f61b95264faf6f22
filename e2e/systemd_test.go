//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/roottest"
	"github.com/agentcage/router/internal/syncbuf"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/control"
)

// The packaged router under a real systemd: TestUnitUnderSystemd boots a Debian root with
// systemd as its PID 1 (systemd-nspawn --boot) inside the lab's host namespace, installs the
// .deb there with apt and drives the shipped units. It needs a root and a package, which
// scripts/test-systemd makes (debootstrap, from Debian's mirror, and scripts/package) and
// names in these variables; without them the test skips, saying so.
const (
	systemdRootEnv = "ROUTER_SYSTEMD_ROOT" // a Debian root with systemd, nftables, man-db, bash-completion
	systemdDebEnv  = "ROUTER_SYSTEMD_DEB"  // router_VERSION_amd64.deb
)

// booted is a Debian root running systemd as its PID 1 under systemd-nspawn, in a network
// namespace of the lab. Its file system is the root's with a tmpfs over it
// (--volatile=overlay): what the test writes there is gone when the container stops, and
// the root can be booted again.
type booted struct {
	t       *testing.T
	cmd     *exec.Cmd       // systemd-nspawn, started by the test (stopped by its PID)
	done    chan error      // cmd's Wait
	leader  int             // the container's PID 1, systemd, as this machine numbers it
	console *syncbuf.Buffer // nspawn's and the container's console
}

// bootRoot boots root with systemd-nspawn in the namespace ns, with deb at /root/router.deb,
// and waits (bounded) until systemd says the system runs. The container keeps what the
// router's unit asks of the kernel: nspawn's own bounding set lacks CAP_BPF and its seccomp
// filter refuses bpf(2) unless told, which a host's systemd does not do. Cleanup powers the
// container off (SIGTERM to nspawn) and, on a failure, logs its console and journal.
func bootRoot(t *testing.T, ns *lab.Netns, root, deb, machine string) *booted {
	t.Helper()
	b := &booted{t: t, done: make(chan error, 1), console: &syncbuf.Buffer{Max: 64 << 10}}
	args := []string{"--quiet", "--boot", "--directory=" + root, "--volatile=overlay",
		"--machine=" + machine, "--network-namespace-path=/run/netns/" + ns.Name(),
		"--capability=CAP_NET_ADMIN,CAP_BPF", "--system-call-filter=bpf", "--console=pipe",
		"--bind-ro=" + deb + ":/root/router.deb", "--register=no"}
	// Never registered with systemd-machined (the test reaches the container through its
	// PID 1, not machinectl). Where no systemd runs this machine, nobody can make the
	// container a scope either: it stays in the test's cgroup.
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		args = append(args, "--keep-unit")
	}
	b.cmd = exec.Command("systemd-nspawn", args...)
	b.cmd.Stdout, b.cmd.Stderr = b.console, b.console
	start := time.Now()
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	t.Cleanup(b.stop)
	children := fmt.Sprintf("/proc/%d/task/%d/children", b.cmd.Process.Pid, b.cmd.Process.Pid)
	if err := wait.Until(20*time.Second, func() error {
		select {
		case err := <-b.done:
			b.done <- err
			return fmt.Errorf("systemd-nspawn exited: %v", err)
		default:
		}
		data, err := os.ReadFile(children)
		if err != nil {
			return err
		}
		f := strings.Fields(string(data))
		if len(f) != 1 {
			return fmt.Errorf("nspawn's children: %q", data)
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			return err
		}
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err != nil || strings.TrimSpace(string(comm)) != "systemd" {
			return fmt.Errorf("the container's PID 1 is not systemd yet: %q %v", comm, err)
		}
		b.leader = pid
		return nil
	}); err != nil {
		t.Fatalf("the container's systemd: %v\nconsole:\n%s", err, b.console)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Until systemd can be asked (its private socket is there), systemctl says "offline" or
	// that it cannot connect; then --wait waits for the boot to end.
	var state string
	if err := wait.Until(time.Minute, func() error {
		out, _ := b.run(ctx, "", "systemctl", "is-system-running", "--wait")
		switch state = strings.TrimSpace(out); state {
		case "running", "degraded", "maintenance", "stopping":
			return nil
		}
		return errors.New(state)
	}); err != nil || state != "running" {
		failed, _ := b.run(ctx, "", "systemctl", "--failed", "--no-pager")
		t.Fatalf("the container's systemd: %q (%v)\n%s\nconsole:\n%s", state, err, failed, b.console)
	}
	t.Logf("figure: systemd booted the root in %v", time.Since(start).Round(10*time.Millisecond))
	return b
}

// run runs a command in the container (every namespace of its PID 1, a clean environment)
// with stdin; it returns the output and the exit code (-1: it did not run).
func (b *booted) run(ctx context.Context, stdin string, args ...string) (string, int) {
	env := []string{"env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
		"SYSTEMD_COLORS=0", "SYSTEMD_PAGER=", "DEBIAN_FRONTEND=noninteractive", "MANPAGER=cat"}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--target", strconv.Itoa(b.leader), "--all", "--"}, append(env, args...)...)...)
	cmd.Stdin = strings.NewReader(stdin)
	return exitStatus(cmd.CombinedOutput())
}

// must runs a command in the container and fails the test unless it exits 0.
func (b *booted) must(ctx context.Context, stdin string, args ...string) string {
	b.t.Helper()
	out, code := b.run(ctx, stdin, args...)
	if code != 0 {
		b.t.Fatalf("in the container: %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// stop powers the container off (nspawn turns SIGTERM into systemd's orderly shutdown) and
// waits for nspawn, killing it after a bound.
func (b *booted) stop() {
	if b.t.Failed() && b.leader != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		journal, _ := b.run(ctx, "", "journalctl", "--no-pager", "-n", "200")
		cancel()
		b.t.Logf("the container's journal:\n%s\nconsole:\n%s", journal, b.console)
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		b.t.Errorf("systemd-nspawn (pid %d) did not stop in 30s after SIGTERM; killed", b.cmd.Process.Pid)
		b.cmd.Process.Kill()
		<-b.done
	}
}

// routerUp waits (bounded) until the daemon under the unit answers `router status`.
func (b *booted) routerUp(ctx context.Context, what string) time.Duration {
	b.t.Helper()
	start := time.Now()
	var last string
	if err := wait.Until(30*time.Second, func() error {
		out, code := b.run(ctx, "", "router", "status")
		if code != 0 {
			last = out
			return fmt.Errorf("router status: exit %d", code)
		}
		return nil
	}); err != nil {
		journal, _ := b.run(ctx, "", "journalctl", "--no-pager", "-u", "router", "-u", "router-guard", "-n", "40")
		b.t.Fatalf("%s: the daemon never answered: %v\n%s\n%s", what, err, last, journal)
	}
	return time.Since(start)
}

// exposure is `systemd-analyze security UNIT`'s overall figure, on the running system.
var exposure = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) `)

// TestUnitUnderSystemd: the .deb in a clean Debian root booted with systemd as PID 1, in the
// lab's host namespace. apt installs it (enabling nothing, saying what to do); the version,
// the man page and the completion answer; router-guard.service and router.service start on
// the scene's config and cage the guest (the proxy's exit address, no leak); an "always"
// answer is written by the daemon under the unit's sandbox to /var/lib/router/approved.toml
// and carries the flow, also after a restart; `systemctl reload` with a broken config fails
// and the daemon keeps running, and a start on it fails (Type=notify); a learning session (the unit's ExecStart with --learn, from
// a runtime drop-in) records the guest's flows in /var/lib/router/flows.jsonl, which
// `router learn --suggest` turns into an allow-list; the live units' exposure stays at most
// 4.0; `apt remove` lifts the guard and says so; ROUTER_ENABLE=1 at install enables and
// starts both units. The figures are logged ("figure:").
func TestUnitUnderSystemd(t *testing.T) {
	root, deb := os.Getenv(systemdRootEnv), os.Getenv(systemdDebEnv)
	roottest.Require(t, tools...)
	if root == "" || deb == "" {
		t.Skipf("needs %s (a Debian root with systemd) and %s (the .deb): run scripts/test-systemd", systemdRootEnv, systemdDebEnv)
	}
	if err := roottest.Check("systemd-nspawn", "nsenter"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(root, "lib/systemd/systemd"), deb} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s/%s: %v", systemdRootEnv, systemdDebEnv, err)
		}
	}
	deb, err := filepath.Abs(deb)
	if err != nil {
		t.Fatal(err)
	}
	s := newLab(t, askConfig("60s"))
	ctx := s.ctx
	b := bootRoot(t, s.lab.Host(), root, deb, "router-"+s.lab.ID())

	// apt install, as a user would (the package's one dependency, nftables, is in the root).
	start := time.Now()
	out := b.must(ctx, "", "apt-get", "install", "-y", "/root/router.deb")
	t.Logf("figure: apt-get install of the .deb took %v", time.Since(start).Round(10*time.Millisecond))
	if !strings.Contains(out, "nothing is enabled yet") {
		t.Errorf("apt install did not say that nothing is enabled:\n%s", out)
	}
	if out := b.must(ctx, "", "router", "--version"); !strings.HasPrefix(out, "router ") {
		t.Errorf("router --version: %q", out)
	}
	if out := b.must(ctx, "", "man", "router"); !strings.Contains(out, "router reload") {
		t.Errorf("man router lacks router reload:\n%.400s", out)
	}
	if out := b.must(ctx, "", "bash", "-c", `source /usr/share/bash-completion/completions/router; COMP_WORDS=(router rel); COMP_CWORD=1; _router; echo "${COMPREPLY[*]}"`); strings.TrimSpace(out) != "reload" {
		t.Errorf("bash completion of 'router rel': %q", out)
	}
	if out, code := b.run(ctx, "", "systemctl", "is-enabled", "router.service", "router-guard.service"); code == 0 {
		t.Errorf("the install enabled the units:\n%s", out)
	}

	// The units on a shipped example as it is (QEMU user networking: it needs no interface
	// nor password of this host), as docs/install.md says.
	b.must(ctx, "", "cp", "/etc/router/examples/linux-qemu-user.toml", "/etc/router/router.toml")
	start = time.Now()
	b.must(ctx, "", "systemctl", "enable", "--now", "router-guard.service", "router.service")
	t.Logf("figure: systemctl enable --now router-guard router took %v", time.Since(start).Round(10*time.Millisecond))
	// Type=notify: the start ended once the daemon said it runs, so it answers at once.
	if out, code := b.run(ctx, "", "router", "status"); code != 0 {
		t.Errorf("router status right after systemctl enable --now: exit %d\n%s", code, out)
	}
	if out, code := b.run(ctx, "", "systemctl", "is-active", "router-guard.service", "router.service"); code != 0 || out != "active\nactive\n" {
		t.Fatalf("systemctl is-active router-guard router on the example config: exit %d\n%s", code, out)
	}

	// The scene's config (the control socket at its default, /run/router): the router
	// stopped, the guard made again from it, the router started.
	cfg := askConfig("60s")
	b.must(ctx, "", "systemctl", "stop", "router.service")
	b.must(ctx, cfg, "install", "-m", "600", "/dev/stdin", "/etc/router/router.toml")
	b.must(ctx, "", "systemctl", "restart", "router-guard.service")
	b.must(ctx, "", "systemctl", "start", "router.service")
	b.routerUp(ctx, "the scene's config")
	if out, code := b.run(ctx, "", "systemctl", "is-active", "router-guard.service", "router.service"); code != 0 || out != "active\nactive\n" {
		t.Fatalf("systemctl is-active router-guard router: exit %d\n%s", code, out)
	}
	status := b.must(ctx, "", "systemctl", "status", "--no-pager", "router.service")
	if !strings.Contains(status, "Active: active (running)") {
		t.Errorf("systemctl status router:\n%s", status)
	}
	t.Logf("systemctl status router:\n%s", status)
	// The daemon runs in the unit's sandbox: no new privileges, a seccomp filter, its own
	// mount namespace with /etc read-only.
	procStatus := b.must(ctx, "", "sh", "-c", "cat /proc/$(systemctl show -P MainPID router.service)/status")
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(procStatus, want) {
			t.Errorf("the daemon's /proc status lacks %q:\n%s", want, procStatus)
		}
	}
	if out := b.must(ctx, "", "sh", "-c", "nsenter --target $(systemctl show -P MainPID router.service) --mount -- findmnt -no OPTIONS --target /etc/router"); !strings.HasPrefix(out, "ro,") {
		t.Errorf("/etc/router in the daemon's mount namespace: %q, want read-only", out)
	}
	if out, _ := run(ctx, s.lab.Host(), "nft", "list", "tables"); !strings.Contains(out, "table inet router") {
		t.Fatalf("the host namespace has no router table under the unit:\n%s", out)
	}
	if err := s.lab.ResetLeaks(ctx); err != nil {
		t.Fatal(err)
	}

	// An "always" answer, written by the sandboxed daemon to its state directory.
	echo := "http://" + lab.EchoName + "/"
	type result struct {
		out  string
		code int
	}
	res := make(chan result, 1)
	go func() { out, code := s.curl(s.lab.Guest(), echo, "--max-time", "30"); res <- result{out, code} }()
	var prompt control.Prompt
	if err := wait.Until(20*time.Second, func() error {
		out, code := b.run(ctx, "", "router", "ask", "--json")
		if code != 0 {
			return fmt.Errorf("router ask --json: exit %d: %s", code, out)
		}
		var ps []control.Prompt
		if err := json.Unmarshal([]byte(out), &ps); err != nil {
			return fmt.Errorf("router ask --json: %w: %s", err, out)
		}
		for _, p := range ps {
			if p.Port == 80 {
				prompt = p
				return nil
			}
		}
		return errors.New("no prompt for port 80 yet")
	}); err != nil {
		t.Fatalf("the guest's flow was never asked about: %v", err)
	}
	b.must(ctx, "", "router", "ask", "--id", strconv.FormatUint(prompt.ID, 10), "--answer", "always")
	if r := <-res; r.code != 0 || strings.TrimSpace(r.out) != lab.ExitAddr {
		t.Errorf("the approved flow: curl exit %d, %q (want the proxy's exit %s)", r.code, r.out, lab.ExitAddr)
	}
	if out := b.must(ctx, "", "cat", "/var/lib/router/approved.toml"); !strings.Contains(out, lab.EchoName) {
		t.Errorf("approved.toml in /var/lib/router:\n%s", out)
	}
	if out := b.must(ctx, "", "stat", "-c", "%a %U", "/var/lib/router", "/var/lib/router/approved.toml"); out != "700 root\n600 root\n" {
		t.Errorf("the state directory and approved.toml: %q, want 700 and 600, root's", out)
	}
	// The approval holds after a restart: the flow goes through at once, never asked again.
	b.must(ctx, "", "systemctl", "restart", "router.service")
	b.routerUp(ctx, "systemctl restart")
	if out, code := s.curl(s.lab.Guest(), echo); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("the approved flow after a restart: curl exit %d, %q", code, out)
	}

	// systemctl reload with a broken config fails, saying why; the daemon keeps running.
	b.must(ctx, cfg+"\n[[rule]]\nname = \"broken\"\naction = \"teleport\"\n", "install", "-m", "600", "/dev/stdin", "/etc/router/router.toml")
	if out, code := b.run(ctx, "", "systemctl", "reload", "router.service"); code == 0 {
		t.Errorf("systemctl reload with a broken config exited 0:\n%s", out)
	}
	if out, code := b.run(ctx, "", "systemctl", "is-active", "router.service"); code != 0 {
		t.Errorf("after the refused reload: router.service %s", out)
	}
	if out := b.must(ctx, "", "journalctl", "--no-pager", "-u", "router", "-n", "20", "-o", "cat"); !strings.Contains(out, "teleport") {
		t.Errorf("the journal does not say why the reload was refused:\n%s", out)
	}
	// A start on the broken config fails too (Type=notify: the daemon exited before it said
	// it runs), and the guard holds meanwhile.
	if out, code := b.run(ctx, "", "systemctl", "restart", "router.service"); code == 0 {
		t.Errorf("systemctl restart with a broken config exited 0:\n%s", out)
	}
	if out, _ := run(ctx, s.lab.Host(), "nft", "list", "tables"); !strings.Contains(out, "table inet router") {
		t.Errorf("no guard while router.service cannot start:\n%s", out)
	}
	b.must(ctx, cfg, "install", "-m", "600", "/dev/stdin", "/etc/router/router.toml")
	b.must(ctx, "", "systemctl", "restart", "router.service")
	b.routerUp(ctx, "the restart on the mended config")
	b.must(ctx, "", "systemctl", "reload", "router.service")

	// A learning session under the unit: its ExecStart with --learn, from a runtime drop-in
	// (what `systemctl edit --runtime router` writes), on a config with no rule for the guest.
	learnCfg := strings.Replace(config(lab.GoSocksAddr, ""), vmRule, "", 1)
	b.must(ctx, learnCfg, "install", "-m", "600", "/dev/stdin", "/etc/router/router.toml")
	dropIn := "[Service]\nExecStart=\nExecStart=/usr/bin/router run --learn --config /etc/router/router.toml\n"
	b.must(ctx, dropIn, "sh", "-c", "mkdir -p /run/systemd/system/router.service.d && cat >/run/systemd/system/router.service.d/override.conf")
	b.must(ctx, "", "systemctl", "daemon-reload")
	b.must(ctx, "", "systemctl", "restart", "router.service")
	b.routerUp(ctx, "the learning session")
	if out, code := s.curl(s.lab.Guest(), echo); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("the learning session: curl exit %d, %q", code, out)
	}
	if err := wait.Until(10*time.Second, func() error {
		out, _ := b.run(ctx, "", "cat", "/var/lib/router/flows.jsonl")
		for _, line := range strings.Split(out, "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["event"] == "flow" && m["caged"] == true && m["name"] == lab.EchoName {
				return nil
			}
		}
		return fmt.Errorf("no caged flow to %s in /var/lib/router/flows.jsonl:\n%s", lab.EchoName, out)
	}); err != nil {
		t.Error(err)
	}
	if out := b.must(ctx, "", "router", "learn", "--config", "/etc/router/router.toml", "--suggest"); !strings.Contains(out, `hosts = ["`+lab.EchoName+`"]`) {
		t.Errorf("router learn --suggest:\n%s", out)
	}
	// Back to the unit as shipped, as docs/linux.md says: systemctl revert, restart.
	b.must(ctx, "", "systemctl", "revert", "router.service")
	b.must(ctx, cfg, "install", "-m", "600", "/dev/stdin", "/etc/router/router.toml")
	b.must(ctx, "", "systemctl", "restart", "router.service")
	b.routerUp(ctx, "the restart after the learning session")
	if out := b.must(ctx, "", "sh", "-c", "tr '\\0' ' ' </proc/$(systemctl show -P MainPID router.service)/cmdline"); strings.Contains(out, "--learn") {
		t.Errorf("after systemctl revert and restart the daemon still learns: %s", out)
	}

	journal := b.must(ctx, "", "journalctl", "--no-pager", "-u", "router", "-u", "router-guard", "-o", "cat")
	for _, bad := range []string{"read-only file system", "permission denied", "operation not permitted", "address family not supported"} {
		if strings.Contains(strings.ToLower(journal), bad) {
			t.Errorf("the unit's sandbox refused the router something (%q):\n%s", bad, journal)
		}
	}
	for _, unit := range []string{"router.service", "router-guard.service"} {
		out := b.must(ctx, "", "systemd-analyze", "security", "--no-pager", unit)
		m := exposure.FindStringSubmatch(out)
		if m == nil {
			t.Errorf("systemd-analyze security %s gave no figure:\n%s", unit, out)
			continue
		}
		t.Logf("figure: systemd-analyze security %s on the running system: %s", unit, m[1])
		if v, err := strconv.ParseFloat(m[1], 64); err != nil || v > 4.0 {
			t.Errorf("systemd-analyze security %s: %s, want at most 4.0", unit, m[1])
		}
	}
	s.wantNoLeak("the guest's flows under the unit")

	// apt remove stops the daemon and lifts the guard, saying so.
	out, code := b.run(ctx, "", "apt-get", "remove", "-y", "router")
	if code != 0 || !strings.Contains(out, "guard lifted") {
		t.Errorf("apt remove: exit %d, without saying the guard is lifted:\n%s", code, out)
	}
	if out, _ := run(ctx, s.lab.Host(), "nft", "list", "tables"); strings.Contains(out, "table inet router") {
		t.Errorf("the guard is still in the host namespace after apt remove:\n%s", out)
	}
	if out, code := b.run(ctx, "", "systemctl", "is-active", "router.service"); code == 0 {
		t.Errorf("router.service still runs after apt remove: %s", out)
	}

	// Installed again with ROUTER_ENABLE=1, the config (which the removal kept) in place:
	// both units enabled and started by the package, the guest caged again.
	out, code = b.run(ctx, "", "ROUTER_ENABLE=1", "apt-get", "install", "-y", "/root/router.deb")
	if code != 0 || !strings.Contains(out, "enabled and started") {
		t.Fatalf("ROUTER_ENABLE=1 apt install: exit %d\n%s", code, out)
	}
	if out, code := b.run(ctx, "", "systemctl", "is-active", "router-guard.service", "router.service"); code != 0 || out != "active\nactive\n" {
		t.Errorf("after ROUTER_ENABLE=1 apt install: systemctl is-active router-guard router: exit %d\n%s", code, out)
	}
	if out, code := s.curl(s.lab.Guest(), echo); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("after ROUTER_ENABLE=1 apt install: curl exit %d, %q", code, out)
	}
}
