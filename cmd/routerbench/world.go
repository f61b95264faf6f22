//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentcage/router/internal/lab"
)

// The benchmark's addresses on top of the lab's (internal/lab/doc.go). Each row has a guest source
// address of its own, so every proxy's capture stays in place for the whole run and the rows
// can be interleaved within a round:
//
//	direct, upstream  10.0.2.15  the lab's guest address: the hypervisor's NAT
//	redsocks          10.0.2.16  nft redirect (table ip rbredir) to redsocks on :12345
//	router            10.0.3.15  the router's own capture (vm_networks = 10.0.3.0/24)
const (
	sinkBulk  = lab.ServiceAddr + ":9000" // throughput
	sinkConns = lab.ServiceAddr + ":9001" // connections, latency, idle flows
	upstream  = lab.InetUplinkAddr + ":1082"
	// upstreamIdle is a second go-socks5 for the memory rows, with splice off: go-socks5
	// splices through Go's io.Copy, which holds two pipes per idle flow, so at the 20,000-fd
	// cap the upstream itself could not hold more than about 3,300 idle flows.
	upstreamIdle = lab.InetUplinkAddr + ":1083"

	srcNAT      = lab.GuestAddr
	srcRedsocks = "10.0.2.16"
	srcRouter   = "10.0.3.15"
	routerNet   = "10.0.3.0/24"
	routerGW    = "10.0.3.2"

	redsocksPort = 12345
	routerPort   = 47100 // the config's default listener_port, written out
)

// world is the lab plus the benchmark's own servers, each a process of its own.
type world struct {
	lab       *lab.Lab
	exe       string // this binary, re-executed for the helpers
	dir       string // configs
	routerBin string
	routerLog string
	routerEnv []string // extra environment of the router (GOGC=..., GODEBUG=...)
	logf      func(format string, args ...any)
	idleWait  time.Duration
	debugMem  func(pid int) // with -v: prints the largest mappings of a proxy holding idle flows

	sink, socks, socksIdle, redsocks, router *lab.Process
}

func newWorld(ctx context.Context, exe, dir, routerBin, routerLog string, routerEnv []string, logf func(string, ...any)) (w *world, err error) {
	l, err := lab.New(ctx, lab.Options{Logf: logf})
	if err != nil {
		return nil, err
	}
	w = &world{lab: l, exe: exe, dir: dir, routerBin: routerBin, routerLog: routerLog, routerEnv: routerEnv, logf: logf}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.close())
		}
	}()
	host, guest, inet := l.Host().Name(), l.Guest().Name(), l.Inet().Name()
	steps := []struct {
		ns    string
		stdin string
		args  []string
	}{
		{guest, "", []string{"ip", "addr", "add", srcRedsocks + "/24", "dev", lab.GuestDev}},
		{guest, "", []string{"ip", "addr", "add", srcRouter + "/24", "dev", lab.GuestDev}},
		{host, "", []string{"ip", "addr", "add", routerGW + "/24", "dev", lab.HostVMDev}},
		// The leak counter would count every packet of the direct and proxied rows.
		{inet, "", []string{"nft", "delete", "table", "inet", lab.LeakTable}},
		{host, fmt.Sprintf(`table ip rbredir {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		iifname %q ip saddr %s tcp dport { 9000, 9001 } redirect to :%d
	}
}
`, lab.HostVMDev, srcRedsocks, redsocksPort), []string{"nft", "-f", "-"}},
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", s.ns}, s.args...)...)
		if s.stdin != "" {
			cmd.Stdin = strings.NewReader(s.stdin)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return w, fmt.Errorf("%s in %s: %w: %s", strings.Join(s.args, " "), s.ns, err, out)
		}
	}
	if w.sink, err = w.start(ctx, "sink", inet, 9001, w.exe, cmdSink, sinkBulk, sinkConns); err != nil {
		return w, err
	}
	if w.socks, err = w.start(ctx, "go-socks5", inet, 1082, w.exe, cmdSocks, upstream, lab.ExitAddr); err != nil {
		return w, err
	}
	if w.socksIdle, err = w.start(ctx, "go-socks5 (no splice)", inet, 1083, w.exe, cmdSocks, "-nosplice", upstreamIdle, lab.ExitAddr); err != nil {
		return w, err
	}
	if err := w.startRedsocks(ctx, upstream); err != nil {
		return w, err
	}
	if err := w.startRouter(ctx, upstream); err != nil {
		return w, err
	}
	return w, nil
}

// start runs name with args in namespace ns and waits until it listens on port.
func (w *world) start(ctx context.Context, what, ns string, port int, name string, args ...string) (*lab.Process, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	if what == "router" && len(w.routerEnv) > 0 {
		cmd.Env = append(os.Environ(), w.routerEnv...)
	}
	p, err := lab.StartProcess(what, cmd)
	if err != nil {
		return nil, err
	}
	if err := waitListen(ctx, p, port); err != nil {
		return p, errors.Join(err, p.Stop(time.Second))
	}
	w.logf("%s: pid %d", what, p.PID())
	return p, nil
}

func (w *world) startRedsocks(ctx context.Context, up string) error {
	conf := filepath.Join(w.dir, "redsocks.conf")
	host, port, _ := strings.Cut(up, ":")
	text := fmt.Sprintf(`base { log_debug = off; log_info = off; log = stderr; daemon = off; redirector = iptables; }
redsocks { local_ip = 0.0.0.0; local_port = %d; ip = %s; port = %s; type = socks5; }
`, redsocksPort, host, port)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return err
	}
	p, err := w.start(ctx, "redsocks", w.lab.Host().Name(), redsocksPort, "redsocks", "-c", conf)
	w.redsocks = p
	return err
}

func (w *world) startRouter(ctx context.Context, up string) error {
	conf := filepath.Join(w.dir, "router.toml")
	text := fmt.Sprintf(`# routerbench: the router captures only the guest's 10.0.3.0/24 address.
[proxy.up]
address = %q

[capture]
vm_networks = [%q]
local = false
listener_port = %d

[dns]
resolver = "%s:53"

[relay]
idle_timeout = "10m"
connect_timeout = "20s" # the memory rows open thousands of flows at once

[log]
level = %q

[control]
socket = %q

[[rule]]
name = "vm"
sources = [%q]
action = "proxy"
proxy = "up"
`, up, routerNet, routerPort, lab.ServiceAddr, w.routerLog, filepath.Join(w.dir, "control.sock"), routerNet)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return err
	}
	p, err := w.start(ctx, "router", w.lab.Host().Name(), routerPort, w.routerBin, "run", "--config", conf)
	w.router = p
	return err
}

// restart replaces a proxy with a fresh process going through upstream up.
func (w *world) restart(ctx context.Context, which, up string) (*lab.Process, error) {
	switch which {
	case "redsocks":
		if err := w.redsocks.Stop(3 * time.Second); err != nil {
			return nil, err
		}
		err := w.startRedsocks(ctx, up)
		return w.redsocks, err
	case "router":
		if err := w.router.Stop(5 * time.Second); err != nil {
			return nil, err
		}
		err := w.startRouter(ctx, up)
		return w.router, err
	}
	return nil, fmt.Errorf("restart %s: not a proxy", which)
}

// close stops every process by PID, then the lab (which also ends whatever is left in its
// namespaces and removes them).
func (w *world) close() error {
	var errs []error
	for _, p := range []*lab.Process{w.router, w.redsocks, w.socksIdle, w.socks, w.sink} {
		if p != nil {
			if err := p.Stop(3 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := w.lab.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waitListen waits until the namespace of p has a TCP socket listening on port (read from
// /proc/PID/net/tcp and tcp6, which shows p's namespace), or p exits, or 20 s pass.
func waitListen(ctx context.Context, p *lab.Process, port int) error {
	want := fmt.Sprintf(":%04X", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited at start (%v):\n%s", p.Name, err, p.Output())
		}
		if listening(p.PID(), want) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s does not listen on port %d:\n%s", p.Name, port, p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listening reports whether /proc/PID/net/tcp has a LISTEN socket whose local address ends
// in suffix (":HEXPORT"). Only the process's own sockets count: the file lists the whole
// namespace, so the inode is checked against the process's descriptors.
func listening(pid int, suffix string) bool {
	inodes := socketInodes(pid)
	for _, file := range []string{"tcp", "tcp6"} {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/net/" + file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			if len(fs) > 9 && fs[3] == "0A" && strings.HasSuffix(fs[1], suffix) && inodes[fs[9]] {
				f.Close()
				return true
			}
		}
		f.Close()
	}
	return false
}

func socketInodes(pid int) map[string]bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, _ := os.ReadDir(dir)
	m := map[string]bool{}
	for _, e := range entries {
		t, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(t, "socket:[") {
			m[strings.TrimSuffix(strings.TrimPrefix(t, "socket:["), "]")] = true
		}
	}
	return m
}
