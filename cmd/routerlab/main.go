// Command routerlab shows the router working in a minute, without a VM: it builds the
// project's lab in network namespaces (an "internet" with an IP-echo server, a DNS server that logs who
// asks and a SOCKS5 upstream; a "host" with the hypervisor's NAT, a model server on
// 127.0.0.1:47831 and the router; a "guest" behind the NAT), runs the real router binary in
// the host, plays what a caged agent does from the guest, prints what the outside saw, and
// tears everything down (also on Ctrl-C or a failure halfway).
//
//	sudo go run ./cmd/routerlab           # the tour, then teardown
//	sudo go run ./cmd/routerlab --keep    # leave the lab up until Ctrl-C, to explore it
//
// It needs root, ip, nft, curl, dig and danted (the README's test command installs them).
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

// labConfig is the router's config in the lab: the README's example, with the lab's addresses.
const labConfig = `# The router's config in the lab (see docs/config.md for every key).
[proxy.exit]
address = "198.51.100.1:1080"        # go-socks5 in the "internet", leaving from 203.0.113.50

[capture]
vm_networks = ["10.0.2.0/24"]        # the guest's NAT network
local = true                         # also this host's own processes (apps rules)

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
name = "hypervisor"
apps = ["VirtualBoxVM.exe", "VBoxHeadless*", "vmnat.exe", "qemu-system-*"]
action = "proxy"

[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"

[[rule]]
name = "default"
action = "direct"
`

func main() {
	keep := flag.Bool("keep", false, "leave the lab running until Ctrl-C (prints how to enter it)")
	verbose := flag.Bool("v", false, "show the lab's setup steps and the router's log")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *keep, *verbose); err != nil {
		fmt.Fprintf(os.Stderr, "\nrouterlab: %v\n", err)
		os.Exit(1)
	}
}

type tour struct {
	ctx    context.Context
	lab    *lab.Lab
	bin    string
	dir    string
	router *lab.Router
	log    strings.Builder // the output of routers that stopped
	fails  int
}

func run(ctx context.Context, keep, verbose bool) error {
	if os.Geteuid() != 0 {
		return errors.New("the lab builds network namespaces: run it as root (sudo go run ./cmd/routerlab)")
	}
	dir, err := os.MkdirTemp("", "routerlab-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t := &tour{ctx: ctx, dir: dir}

	step("Building the router binary")
	t.bin = filepath.Join(dir, "router")
	// go run puts its own go first on PATH, so this is the go that runs us (sudo may have
	// dropped it from the user's PATH).
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", t.bin, "./cmd/router").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/router (run routerlab from the repository root): %v\n%s", err, out)
	}

	step("Building the lab: internet, host (hypervisor NAT, model on 127.0.0.1:47831), guest 10.0.2.15")
	logf := func(string, ...any) {}
	if verbose {
		logf = func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }
	}
	l, err := lab.New(ctx, lab.Options{Logf: logf})
	if err != nil {
		return err
	}
	t.lab = l
	defer func() {
		step("Tearing the lab down")
		t.stopRouter(syscall.SIGTERM)
		if err := l.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "    lab close: %v\n", err)
		}
		if verbose {
			fmt.Printf("\n---- router log\n%s", t.log.String())
		}
	}()

	step("Before the router: the guest behind the hypervisor's NAT alone")
	out, _ := t.guest("curl", "-sS", "--max-time", "5", lab.EchoURL)
	say("guest curl %s → the internet sees %s (the host's own address: this is the leak)", lab.EchoURL, strings.TrimSpace(out))
	l.ResetLeaks(ctx)
	l.ResetLogs()

	cfg := filepath.Join(dir, "router.toml")
	control := fmt.Sprintf("\n[control]\nsocket = %q\n", filepath.Join(dir, "control", "control.sock"))
	if err := os.WriteFile(cfg, []byte(labConfig+control), 0o600); err != nil {
		return err
	}
	step("Starting `router run --config router.toml` in the host namespace")
	if err := t.startRouter(cfg); err != nil {
		return err
	}
	say("config: %s (printed below with -v)", cfg)
	l.ResetLeaks(ctx)

	step("The guest, caged")
	t.expect("guest fetches the echo page by address", lab.ExitAddr, "curl", "-sS", "--max-time", "5", lab.EchoURL)
	t.expect("guest fetches it by name ("+lab.EchoName+", answered by the router, resolved by the proxy)", lab.ExitAddr, "curl", "-sS", "--max-time", "5", "http://"+lab.EchoName+"/")
	t.expect("guest asks the model for its ids through the forward 10.0.2.2:47831", lab.ModelID, "curl", "-sS", "--max-time", "5", "http://10.0.2.2:47831/v1/models")
	out, _ = t.guest("dig", "+short", "+time=2", "+tries=1", "@"+lab.ServiceAddr, lab.EchoName)
	say("guest digs %s at the outside resolver → %s (a fake IP from the router; the query never left)", lab.EchoName, strings.TrimSpace(out))
	out, code := t.guest(t.bin, "check-ip", "--echo", lab.EchoURL, "--expect", lab.ExitAddr, "--model", "http://10.0.2.2:47831")
	say("guest runs `router check-ip --expect %s --model http://10.0.2.2:47831` (exit %d):", lab.ExitAddr, code)
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		fmt.Printf("      %s\n", line)
	}

	step("What the outside saw")
	for _, r := range l.HTTPLog() {
		say("echo server: %s asked for %s%s", r.Remote.Addr(), r.Host, r.Path)
	}
	asked := map[string]int{}
	for _, q := range l.DNSLog() {
		asked[q.Source.Addr().String()]++
	}
	for who, n := range asked {
		say("DNS server: %d queries from %s", n, who)
	}
	if len(asked) == 0 {
		say("DNS server: no query at all reached it from the host or the guest")
	}
	leaks, err := l.Leaks(ctx)
	if err != nil {
		return err
	}
	say("leak counter on the uplink (anything from 198.51.100.2 that is not SOCKS to the proxy): %d", leaks.Packets)
	if leaks.Packets != 0 {
		t.fails++
	}

	step("Fail closed: SIGKILL the router")
	t.stopRouter(syscall.SIGKILL)
	out, code = t.guest("curl", "-sS", "--max-time", "3", lab.EchoURL)
	say("guest curl → exit %d (%s): refused, not leaked", code, strings.TrimSpace(firstLine(out)))
	leaks, _ = l.Leaks(ctx)
	say("leak counter: %d", leaks.Packets)
	if code == 0 || leaks.Packets != 0 {
		t.fails++
	}

	if keep {
		if err := t.startRouter(cfg); err != nil {
			return err
		}
		step("The lab stays up until Ctrl-C. Try:")
		say("ip netns exec %s curl -s %s", l.Guest().Name(), lab.EchoURL)
		say("ip netns exec %s %s explain --config %s --src 10.0.2.15 --dst %s:443", l.Host().Name(), t.bin, cfg, lab.EchoName)
		say("ip netns exec %s nft list table inet router", l.Host().Name())
		<-ctx.Done()
	}
	if t.fails > 0 {
		return fmt.Errorf("%d check(s) did not hold", t.fails)
	}
	step("Every check held.")
	return nil
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

func (t *tour) expect(what, want string, name string, args ...string) {
	out, code := t.guest(name, args...)
	mark := "✓"
	if code != 0 || !strings.Contains(out, want) {
		mark = "✗"
		t.fails++
	}
	say("%s %s → %s", mark, what, strings.TrimSpace(firstLine(out)))
}

func (t *tour) startRouter(cfg string) error {
	r, err := t.lab.StartRouter(t.bin, cfg, 15*time.Second)
	if err != nil {
		return err
	}
	t.router = r
	return nil
}

func (t *tour) stopRouter(sig syscall.Signal) {
	if t.router == nil {
		return
	}
	if err := t.router.Stop(sig, 10*time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "    %v\n", err)
	}
	t.log.WriteString(t.router.Log())
	t.router = nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func step(s string) { fmt.Printf("\n== %s\n", s) }

func say(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }
