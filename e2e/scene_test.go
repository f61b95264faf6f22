//go:build linux

// Package e2e plays the whole scheme of the product in network namespaces (package
// internal/lab): a guest behind the hypervisor's NAT, a host running the real router binary,
// an internet with an IP-echo server, a DNS server that logs who asks and real SOCKS5
// upstreams (go-socks5 and Debian's dante). It asserts from the outside: what the echo and DNS
// servers saw and the leak counter on the uplink. The tests need root and run only with
// ROUTER_E2E=1 (package internal/roottest; scripts/test sets it): without it they skip, saying
// so; with it, a machine that cannot build the lab fails them.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/roottest"
)

// tools are the programs the scenes run, besides the router.
var tools = []string{"ip", "nft", "danted", "curl", "dig"}

// routerBin is the router binary built once for all tests (only with ROUTER_E2E=1).
var routerBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	on, err := roottest.Enabled()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if !on {
		return m.Run() // every test skips in roottest.Require, saying how to run it
	}
	if err := roottest.Check(tools...); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "router-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	routerBin = filepath.Join(dir, "router")
	// Static, as released (scripts/package): the QEMU guest runs it in a busybox initramfs.
	build := exec.Command("go", "build", "-o", routerBin, "../cmd/router")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: build router: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// config is the router config of the scene; proxy is the upstream's address.
func config(proxy string, extra string) string {
	return fmt.Sprintf(`
[proxy.exit]
address = %q

[capture]
vm_networks = ["10.0.2.0/24"]
local = true

[[forward]]
name = "model"
listen = "10.0.2.2:47831"
connect = "127.0.0.1:47831"
allow = ["10.0.2.15/32"]

[dns]
resolver = "203.0.113.10:53"
%s
[relay]
idle_timeout = "10m"
connect_timeout = "3s"

[[rule]]
name = "model-direct"
hosts = ["10.0.2.2", "127.0.0.1"]
ports = [47831]
action = "direct"

[[rule]]
name = "hypervisor"
apps = ["VBoxHeadless", "qemu-system-*"]
action = "proxy"

[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"

[[rule]]
name = "default"
action = "direct"
`, proxy, extra)
}

type scene struct {
	t      *testing.T
	ctx    context.Context
	lab    *lab.Lab
	dir    string
	cfg    string
	router *lab.Router
	logs   string // the last router's output, once it stopped
}

// log returns the running router's output, or the last one's.
func (s *scene) log() string {
	if s.router != nil {
		return s.router.Log()
	}
	return s.logs
}

// newScene builds the lab and starts the router with cfg.
func newScene(t *testing.T, cfg string) *scene {
	t.Helper()
	s := newLab(t, cfg)
	s.startRouter()
	return s
}

// newLab builds the lab and writes cfg, without starting a router.
func newLab(t *testing.T, cfg string) *scene {
	t.Helper()
	return newLabWith(t, cfg, lab.Options{})
}

// newLabWith is newLab with lab options (go-socks5's credentials); Logf is the test's.
func newLabWith(t *testing.T, cfg string, opts lab.Options) *scene {
	t.Helper()
	roottest.Require(t, tools...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	opts.Logf = t.Logf
	l, err := lab.New(ctx, opts)
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	s := &scene{t: t, ctx: ctx, lab: l, dir: t.TempDir()}
	t.Cleanup(func() {
		s.stopRouter(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("router log:\n%s", s.log())
			t.Logf("lab:\n%s", l.Diagnostics(context.Background()))
		}
		if err := l.Close(); err != nil {
			t.Errorf("lab close: %v", err)
		}
	})
	s.cfg = filepath.Join(s.dir, "router.toml")
	s.writeConfig(cfg)
	return s
}

// writeConfig writes cfg, with the scene's own control socket (never the machine's).
func (s *scene) writeConfig(cfg string) {
	cfg += fmt.Sprintf("\n[control]\nsocket = %q\n", s.controlPath())
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

func (s *scene) controlPath() string { return filepath.Join(s.dir, "control", "control.sock") }

// startRouter runs `router run` in the host namespace and waits until it says it runs.
func (s *scene) startRouter() {
	s.t.Helper()
	r, err := s.lab.StartRouter(routerBin, s.cfg, 15*time.Second)
	if err != nil {
		s.t.Fatal(err)
	}
	s.router = r
	// Everything the router did to start (nothing should reach the uplink) is behind us;
	// the counter measures what follows.
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		s.t.Fatal(err)
	}
}

func (s *scene) waitLog(want string, d time.Duration) {
	s.t.Helper()
	if err := s.router.WaitLog(want, d); err != nil {
		s.t.Fatal(err)
	}
}

// secondGuest adds the lab's second guest (lab.AddSecondGuest) or fails the test.
func (s *scene) secondGuest() *lab.Netns {
	s.t.Helper()
	g, err := s.lab.AddSecondGuest(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return g
}

// stopRouter signals the router (by PID) and waits for it to exit.
func (s *scene) stopRouter(sig syscall.Signal) {
	if s.router == nil {
		return
	}
	if err := s.router.Stop(sig, 10*time.Second); err != nil {
		s.t.Error(err)
	}
	s.logs, s.router = s.router.Log(), nil
}

// run runs a command in a namespace; it returns the output and the exit code.
func run(ctx context.Context, ns *lab.Netns, name string, args ...string) (string, int) {
	return exitStatus(ns.Run(ctx, name, args...))
}

// exitStatus is a finished command's output and exit code, from what running it returned:
// -1 when it did not run or was not waited for (the error follows the output then).
func exitStatus(out []byte, err error) (string, int) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		return string(out) + err.Error(), -1
	}
	return string(out), 0
}

// curl fetches url from a namespace with a short timeout; extra args go first.
func (s *scene) curl(ns *lab.Netns, url string, extra ...string) (string, int) {
	args := append([]string{"-sS", "--max-time", "5"}, extra...)
	return run(s.ctx, ns, "curl", append(args, url)...)
}

func (s *scene) leaks() lab.Leaks {
	s.t.Helper()
	l, err := s.lab.Leaks(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return l
}

func (s *scene) wantNoLeak(what string) {
	s.t.Helper()
	if l := s.leaks(); l.Packets != 0 {
		s.t.Errorf("%s: %d packets left the host's own address outside the proxy (%v)", what, l.Packets, l)
	}
}

// hypervisorCopy copies a binary under a hypervisor's name, for apps rules.
func (s *scene) hypervisorCopy(bin, name string) string {
	s.t.Helper()
	src, err := exec.LookPath(bin)
	if err != nil {
		s.t.Fatal(err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		s.t.Fatal(err)
	}
	dst := filepath.Join(s.dir, name)
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		s.t.Fatal(err)
	}
	return dst
}

// hostService serves reply to every connection on address in the host namespace until the
// test ends, and counts the connections it accepted: a service of the host that the
// guests must never reach.
func (s *scene) hostService(address, reply string) *atomic.Int32 {
	return s.tcpService(s.lab.Host(), address, reply)
}

// service runs answer on every connection accepted on address in ns (then closes it) until
// the test ends, and counts the connections.
func (s *scene) service(ns *lab.Netns, address string, answer func(net.Conn)) *atomic.Int32 {
	s.t.Helper()
	ln, err := ns.Listen(s.ctx, "tcp", address)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { ln.Close() })
	accepted := new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			answer(c)
			c.Close()
		}
	}()
	return accepted
}
