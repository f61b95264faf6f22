// Command routerlab shows the router working in a minute, without a VM: it builds the
// project's lab in network namespaces (an "internet" with an IP-echo server, a DNS server that logs who
// asks and a SOCKS5 upstream; a "host" with the hypervisor's NAT, a model server on
// 127.0.0.1:47831 and the router; a "guest" behind the NAT), runs the real router binary in
// the host, plays what a caged agent does from the guest, prints what the outside saw, and
// tears everything down (also on Ctrl-C or a failure halfway).
//
//	sudo go run ./cmd/routerlab           # the tour, then teardown
//	sudo go run ./cmd/routerlab -v        # also the lab's setup, the router's config and its log
//	sudo go run ./cmd/routerlab --keep    # then leave the lab up, following the router's log, until Ctrl-C
//
// It needs root, ip, nft, curl, dig, danted and a Go toolchain, and checks for them before it
// builds anything: what is missing is named with its Debian package, and it exits 2. It exits
// 1 when a check of the tour did not hold, 130 when interrupted before the tour ended.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentcage/router/internal/lab"
)

// labConfig is the router's config in the lab, with its control socket at controlSocket (in
// the lab's own directory, so that `router status --socket` reaches this daemon and never
// the machine's). The lab's hypervisor NATs the guest in the kernel through the host's
// vmnet interface, as libvirt does, with QEMU's user-network addresses (guest 10.0.2.15,
// host 10.0.2.2). config_test.go keeps it lint clean and caging.
func labConfig(controlSocket string) string {
	return fmt.Sprintf(`# The router's config in the lab (see docs/config.md for every key).
[proxy.exit]
address = "198.51.100.1:1080"        # go-socks5 in the "internet", leaving from 203.0.113.50

[capture]
hypervisors = ["qemu"]               # cages qemu-system-*, passt, slirp4netns (user-space NAT, seen with local = true)
vm_networks = ["10.0.2.0/24"]        # the guest's NAT network
vm_interfaces = ["vmnet"]            # the host's VM-facing link: caged whole, any source, IPv4 and IPv6
local = true                         # also this host's own processes (the caged apps above)

[[forward]]                          # the portproxy replacement
name = "model"
listen = "10.0.2.2:47831"            # VM-facing address only
connect = "127.0.0.1:47831"          # the model server listens on loopback only
allow = ["10.0.2.0/24"]

[dns]
mode = "fake-ip"
resolver = "203.0.113.10:53"         # reached through the proxy

[[rule]]
name = "model-direct"
hosts = ["10.0.2.2", "127.0.0.1", "localhost"]
ports = [47831]
action = "direct"

[[rule]]
name = "cage"                        # the guest and the hypervisor's processes: only the proxy
caged = true                         # (caged traffic that no rule decides is refused)
action = "proxy"

[[rule]]
name = "default"                     # this host's other traffic
action = "direct"

[control]
socket = %q
`, controlSocket)
}

// Exit codes.
const (
	exitFailed      = 1   // a check did not hold, or the lab could not be built
	exitPrereq      = 2   // a prerequisite is missing
	exitInterrupted = 130 // Ctrl-C or SIGTERM before the tour ended
)

// errInterrupted ends the tour when ctx is cancelled (Ctrl-C) before it ended.
var errInterrupted = errors.New("interrupted")

func main() {
	keep := flag.Bool("keep", false, "after the tour, leave the lab up and follow the router's log until Ctrl-C (prints how to reach the daemon and the guest)")
	verbose := flag.Bool("v", false, "also print the lab's setup steps, the router's config and the router's log")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, options{keep: *keep, verbose: *verbose})
	stop()
	var pe *prereqError
	switch {
	case err == nil:
	case errors.As(err, &pe):
		fmt.Fprintf(os.Stderr, "routerlab: %v\n", err)
		os.Exit(exitPrereq)
	case errors.Is(err, errInterrupted):
		fmt.Fprintln(os.Stderr, "\nrouterlab: interrupted; nothing of the lab is left running")
		os.Exit(exitInterrupted)
	default:
		fmt.Fprintf(os.Stderr, "\nrouterlab: %v\n", err)
		os.Exit(exitFailed)
	}
}

type options struct {
	keep, verbose bool
}

type tour struct {
	ctx    context.Context
	opts   options
	lab    *lab.Lab
	bin    string // the router binary
	dir    string // the run's directory: binary, config, control socket
	cfg    string // the config file
	socket string // the control socket the config names
	router *lab.Router
	rlog   *routerLog // prints the running router's log
	follow bool       // --keep follows the router's log: its last lines are printed at stop
	fails  int
}

func run(ctx context.Context, opts options) error {
	// ip, nft and danted live in sbin directories, which a user's PATH (and so `su` or
	// `sudo env PATH=$PATH`) often lacks: look there too, for the check and for the lab.
	if err := os.Setenv("PATH", withSbin(os.Getenv("PATH"))); err != nil {
		return fmt.Errorf("set PATH: %w", err)
	}
	err := checkPrerequisites(prereqEnv{
		root:     os.Geteuid() == 0,
		lookPath: exec.LookPath,
		module: func() (string, error) {
			out, err := exec.CommandContext(ctx, "go", "list", "-m").Output()
			return strings.TrimSpace(string(out)), err
		},
	})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "routerlab-")
	if err != nil {
		return fmt.Errorf("make the run's directory: %w", err)
	}
	defer os.RemoveAll(dir)
	t := &tour{
		ctx:    ctx,
		opts:   opts,
		dir:    dir,
		bin:    filepath.Join(dir, "router"),
		cfg:    filepath.Join(dir, "router.toml"),
		socket: filepath.Join(dir, "control", "control.sock"),
	}

	step("Building the router binary")
	// go run puts its own go first on PATH, so this is the go that runs us (sudo may have
	// dropped it from the user's PATH). The package path works from anywhere in the repository.
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", t.bin, modulePath+"/cmd/router").CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return fmt.Errorf("go build %s/cmd/router: %w\n%s", modulePath, err, out)
	}

	step("Building the lab: internet, host (hypervisor NAT, model on 127.0.0.1:47831), guest 10.0.2.15")
	logf := func(string, ...any) {}
	if opts.verbose {
		logf = func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }
	}
	l, err := lab.New(ctx, lab.Options{Logf: logf})
	if err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return err
	}
	t.lab = l
	defer func() {
		step("Tearing the lab down")
		t.stopRouter(syscall.SIGTERM)
		if err := l.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "    %v\n", err)
		}
	}()
	if err := t.tour(); err != nil {
		return err
	}
	if opts.keep {
		if err := t.keepUp(); err != nil {
			return err
		}
	}
	if t.fails > 0 {
		return fmt.Errorf("%d check(s) did not hold", t.fails)
	}
	step("Every check held.")
	return nil
}

// tour plays the demo on a built lab; it returns errInterrupted when ctx ends halfway.
func (t *tour) tour() error {
	l, ctx := t.lab, t.ctx
	step("Before the router: the guest behind the hypervisor's NAT alone")
	out, _ := t.guest("curl", "-sS", "--max-time", "5", lab.EchoURL)
	say("guest curl %s → the internet sees %s (the host's own address: this is the leak)", lab.EchoURL, strings.TrimSpace(out))
	if err := l.ResetLeaks(ctx); err != nil {
		return t.failed(fmt.Errorf("reset the leak counter: %w", err))
	}
	l.ResetLogs()

	step("The router's config, linted")
	if err := os.WriteFile(t.cfg, []byte(labConfig(t.socket)), 0o600); err != nil {
		return fmt.Errorf("write the config: %w", err)
	}
	if t.opts.verbose {
		say("%s:", t.cfg)
		for line := range strings.Lines(labConfig(t.socket)) {
			fmt.Printf("      %s", line)
		}
	} else {
		say("config: %s (-v prints it)", t.cfg)
	}
	t.lint()
	if err := t.interrupted(); err != nil {
		return err
	}

	step("Starting `router run --config router.toml` in the host namespace")
	if err := t.startRouter(); err != nil {
		return t.failed(err)
	}
	say("router running, pid %d, control socket %s", t.router.PID(), t.socket)
	if err := l.ResetLeaks(ctx); err != nil {
		return t.failed(fmt.Errorf("reset the leak counter: %w", err))
	}

	step("The guest, caged")
	t.expect("guest fetches the echo page by address", lab.ExitAddr, "curl", "-sS", "--max-time", "5", lab.EchoURL)
	t.expect("guest fetches it by name ("+lab.EchoName+", answered by the router, resolved by the proxy)", lab.ExitAddr, "curl", "-sS", "--max-time", "5", "http://"+lab.EchoName+"/")
	t.expect("guest asks the model for its ids through the forward 10.0.2.2:47831", lab.ModelID, "curl", "-sS", "--max-time", "5", "http://10.0.2.2:47831/v1/models")
	out, _ = t.guest("dig", "+short", "+time=2", "+tries=1", "@"+lab.ServiceAddr, lab.EchoName)
	say("guest digs %s at the outside resolver → %s (a fake IP from the router; the query never left)", lab.EchoName, strings.TrimSpace(out))
	t.expect("guest asks the outside resolver who is asking (TXT "+lab.WhoamiName+"; the router relays it through the proxy)", lab.ExitAddr,
		"dig", "+short", "+time=3", "+tries=1", "@"+lab.ServiceAddr, lab.WhoamiName, "TXT")
	if err := t.interrupted(); err != nil {
		return err
	}
	out, code := t.guest(t.bin, "check-ip", "--echo", lab.EchoURL, "--expect", lab.ExitAddr, "--expect-not", lab.HostUplinkAddr,
		"--model", "http://10.0.2.2:47831", "--dns-whoami", lab.WhoamiName)
	if err := t.interrupted(); err != nil {
		return err
	}
	say("guest runs `router check-ip --expect %s --expect-not %s --model http://10.0.2.2:47831 --dns-whoami %s` (exit %d):",
		lab.ExitAddr, lab.HostUplinkAddr, lab.WhoamiName, code)
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		fmt.Printf("      %s\n", line)
	}
	if code != 0 {
		t.fails++
	}

	step("What the outside saw")
	for _, r := range l.HTTPLog() {
		say("echo server: %s asked for %s%s", r.Remote.Addr(), r.Host, r.Path)
	}
	lines, leak := dnsReport(l.DNSLog())
	for _, line := range lines {
		say("%s", line)
	}
	if leak {
		t.fails++
	}
	leaks, err := l.Leaks(ctx)
	if err != nil {
		return t.failed(fmt.Errorf("read the leak counter: %w", err))
	}
	say("leak counter on the uplink (anything from %s that is not SOCKS to the proxy): %d", lab.HostUplinkAddr, leaks.Packets)
	if leaks.Packets != 0 {
		t.fails++
	}

	step("Fail closed: SIGKILL the router")
	if t.opts.verbose {
		say("the router's log, until the kill:")
	}
	t.stopRouter(syscall.SIGKILL)
	out, code = t.guest("curl", "-sS", "--max-time", "3", lab.EchoURL)
	say("guest curl → exit %d (%s): refused, not leaked", code, strings.TrimSpace(firstLine(out)))
	leaks, err = l.Leaks(ctx)
	if err != nil {
		return t.failed(fmt.Errorf("read the leak counter: %w", err))
	}
	say("leak counter: %d", leaks.Packets)
	if code == 0 || leaks.Packets != 0 {
		t.fails++
	}
	return t.interrupted()
}

// keepUp restarts the router, says how to reach it and the guest, and follows its log until
// ctx ends (Ctrl-C).
func (t *tour) keepUp() error {
	step("Keeping the lab up: the router runs again")
	if err := t.startRouter(); err != nil {
		return t.failed(err)
	}
	host, guest := t.lab.Host().Name(), t.lab.Guest().Name()
	say("From another shell, as root:")
	say("  the daemon:   %s status --socket %s", t.bin, t.socket)
	say("  the guest:    ip netns exec %s bash", guest)
	say("    and in it:  curl -s %s ; curl -s http://%s/ ; dig +short TXT %s", lab.EchoURL, lab.EchoName, lab.WhoamiName)
	say("  a verdict:    ip netns exec %s %s explain --config %s --socket %s --src %s --dst %s:443",
		host, t.bin, t.cfg, t.socket, lab.GuestAddr, lab.EchoName)
	say("  the capture:  ip netns exec %s nft list table inet router", host)
	say("  the host:     ip netns exec %s bash", host)
	step("The router's log as it comes (Ctrl-C tears the lab down)")
	t.follow = true
	if t.rlog.follow(t.ctx, 200*time.Millisecond) {
		say("the router exited; the lab stays up (fail closed) until Ctrl-C")
		<-t.ctx.Done()
	}
	return nil
}

// lint runs `router lint` on the config in the host namespace and prints what it says.
func (t *tour) lint() {
	out, err := t.lab.Host().Run(t.ctx, t.bin, "lint", "--config", t.cfg)
	text := strings.TrimRight(string(out), "\n")
	ok := err == nil && strings.HasSuffix(text, ": 0 errors, 0 warnings")
	if !ok || t.opts.verbose {
		for line := range strings.Lines(text) {
			say("  %s", strings.TrimRight(line, "\n"))
		}
	}
	if !ok {
		t.fails++
		say("✗ `router lint` is not clean (%v)", err)
		return
	}
	say("✓ `router lint --config router.toml` → 0 errors, 0 warnings")
}

// interrupted returns errInterrupted once ctx has ended.
func (t *tour) interrupted() error {
	if t.ctx.Err() != nil {
		return errInterrupted
	}
	return nil
}

// failed returns errInterrupted instead of err when ctx ended (the failure is its echo).
func (t *tour) failed(err error) error {
	if t.ctx.Err() != nil {
		return errInterrupted
	}
	return err
}

func (t *tour) guest(name string, args ...string) (string, int) {
	out, err := t.lab.Guest().Run(t.ctx, name, args...)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		return err.Error(), -1
	}
	return string(out), 0
}

// expect runs a command in the guest and marks whether its output holds want; it prints
// nothing once ctx has ended (the failure would be the interruption's).
func (t *tour) expect(what, want string, name string, args ...string) {
	out, code := t.guest(name, args...)
	if t.ctx.Err() != nil {
		return
	}
	mark := "✓"
	if code != 0 || !strings.Contains(out, want) {
		mark = "✗"
		t.fails++
	}
	say("%s %s → %s", mark, what, strings.TrimSpace(firstLine(out)))
}

func (t *tour) startRouter() error {
	r, err := t.lab.StartRouter(t.bin, t.cfg, 15*time.Second)
	if err != nil {
		return err
	}
	t.router = r
	t.rlog = &routerLog{src: r, w: os.Stdout, prefix: "      router| "}
	return nil
}

// stopRouter stops the running router with sig; with -v or when its log is followed, it
// prints what of the log was not printed yet.
func (t *tour) stopRouter(sig syscall.Signal) {
	if t.router == nil {
		return
	}
	if err := t.router.Stop(sig, 10*time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "    %v\n", err)
	}
	if t.opts.verbose || t.follow {
		t.rlog.printNew(true)
	}
	t.router, t.rlog = nil, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func step(s string) { fmt.Printf("\n== %s\n", s) }

func say(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }
