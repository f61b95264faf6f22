//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentcage/router/internal/bench"
	"github.com/agentcage/router/internal/lab"
)

// The benchmark's addresses on top of the lab's (internal/lab/doc.go). Each row has a guest source
// address of its own, so every proxy's capture stays in place for the whole run and the rows
// can be interleaved within a round:
//
//	direct, upstream  10.0.2.15  the lab's guest address: the hypervisor's NAT
//	redsocks          10.0.2.16  nft redirect (table ip rbredir) to redsocks on :12345
//	singbox           10.0.2.17  nft redirect (table ip rbredir) to sing-box on :12346
//	router            10.0.3.15  the router's own capture (vm_networks = 10.0.3.0/24)
//	router-base       10.0.4.15  the second build's own capture (10.0.4.0/24, its own table,
//	                             ports and mark)
//
// A router cages every interface that carries an address of its VM networks whole, so each
// router row has a veth pair of its own between guest and host (host side vmr3/vmr4 with the
// gateway address, guest side eth3/eth4), and the guest routes the row's source address
// through it (ip rule from SRC lookup 103/104). The other rows share the lab's vmnet.
//
// The agent's workload adds an HTTPS file server beside the sink (sinkTLS, a self-signed
// certificate made at start, in the run's directory) and a streaming fake model server in the
// host (modelLocal and modelDirect, a process of its own): each router row reaches it
// through its [[forward]] on its gateway address (modelPort), the other rows straight at
// modelDirect, the host's VM-facing address, with no forward in between.
const (
	sinkBulk  = lab.ServiceAddr + ":9000" // throughput
	sinkConns = lab.ServiceAddr + ":9001" // connections, latency, idle flows
	sinkTLS   = lab.ServiceAddr + ":9443" // the agent's HTTPS fetches

	modelPort   = 47900
	modelLocal  = "127.0.0.1:47900"          // the routers' forwards connect here
	modelDirect = lab.GatewayAddr + ":47900" // the other rows' streams
	upstream    = lab.InetUplinkAddr + ":1082"
	// upstreamIdle is a second go-socks5 for the memory rows, with splice off: go-socks5
	// splices through Go's io.Copy, which holds two pipes per idle flow, so at the 20,000-fd
	// cap the upstream itself could not hold more than about 3,300 idle flows.
	upstreamIdle = lab.InetUplinkAddr + ":1083"
	// sinkName is the sink's name in the lab DNS, for -names, and the name in the HTTPS file
	// server's certificate, which the agent's fetches ask for (SNI and Host) in every row.
	sinkName = "sink.test"

	srcNAT      = lab.GuestAddr
	srcRedsocks = "10.0.2.16"
	srcSingbox  = "10.0.2.17"

	redsocksPort = 12345
	singboxPort  = 12346
)

// routerSpec is where one router build runs: its guest source network and the keys that two
// routers in one namespace must not share (nftables table, listener and DNS ports, socket
// mark, control socket, state directory).
type routerSpec struct {
	name    string // the row
	net, gw string // the VM network it captures and the host's address on it
	src     string // the guest's address in net
	port    int    // listener_port
	dnsPort int    // dns_port
	mark    uint32
	table   string
	// The row's veth pair, host and guest side, and the guest's routing table for src.
	hostDev, guestDev string
	routeTable        int
}

// routerSpecOf is the spec of row router or router-base.
func routerSpecOf(name string) routerSpec {
	if name == rowRouterBase {
		return routerSpec{name: rowRouterBase, net: "10.0.4.0/24", gw: "10.0.4.2", src: "10.0.4.15",
			port: 47200, dnsPort: 47253, mark: 0x524f5555, table: "router_base",
			hostDev: "vmr4", guestDev: "eth4", routeTable: 104}
	}
	return routerSpec{name: rowRouter, net: "10.0.3.0/24", gw: "10.0.3.2", src: "10.0.3.15",
		port: 47100, dnsPort: 47153, mark: 0x524f5554, table: "router",
		hostDev: "vmr3", guestDev: "eth3", routeTable: 103}
}

// world is the lab plus the benchmark's own servers, each a process of its own.
type world struct {
	lab       *lab.Lab
	exe       string            // this binary, re-executed for the helpers
	dir       string            // configs
	bins      map[string]string // row name -> binary of its proxy (router, router-base, singbox)
	routerLog string
	routerEnv []string // extra environment of the routers (GOGC=..., GODEBUG=...)
	logf      func(format string, args ...any)
	idleWait  time.Duration
	debugMem  func(pid int) // with -v: prints the largest mappings of a proxy holding idle flows
	// names: -names (routerConfig); fakeIP are the router rows' targets then: the fake IP
	// each router's DNS gave sinkName.
	names  bool
	fakeIP map[string]netip.Addr
	// caFile is the HTTPS file server's certificate, which the agent's fetches trust.
	caFile string

	sink, socks, socksIdle, model *lab.Process
	procs                         map[string]*lab.Process // row name -> its proxy
}

func newWorld(ctx context.Context, exe, dir string, rs []row, bins map[string]string, routerLog string, routerEnv []string, names bool, logf func(string, ...any)) (w *world, err error) {
	opts := lab.Options{Logf: logf}
	if names {
		opts.Names = map[string]netip.Addr{sinkName: netip.MustParseAddr(lab.ServiceAddr)}
	}
	l, err := lab.New(ctx, opts)
	if err != nil {
		return nil, err
	}
	w = &world{lab: l, exe: exe, dir: dir, bins: bins, routerLog: routerLog, routerEnv: routerEnv, logf: logf, procs: map[string]*lab.Process{},
		names: names, fakeIP: map[string]netip.Addr{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.close())
		}
	}()
	host, guest, inet := l.Host().Name(), l.Guest().Name(), l.Inet().Name()
	type step struct {
		ns    string
		stdin string
		args  []string
	}
	steps := []step{
		// The leak counter would count every packet of the direct and proxied rows.
		{inet, "", []string{"nft", "delete", "table", "inet", lab.LeakTable}},
	}
	var redirects strings.Builder
	for _, r := range rs {
		switch r.name {
		case rowRedsocks, rowSingbox:
			port := redsocksPort
			if r.name == rowSingbox {
				port = singboxPort
			}
			steps = append(steps, step{guest, "", []string{"ip", "addr", "add", r.src + "/24", "dev", lab.GuestDev}})
			fmt.Fprintf(&redirects, "\t\tiifname %q ip saddr %s tcp dport { 9000, 9001, 9443 } redirect to :%d\n", lab.HostVMDev, r.src, port)
		case rowRouter, rowRouterBase:
			spec := routerSpecOf(r.name)
			table := strconv.Itoa(spec.routeTable)
			steps = append(steps,
				step{host, "", []string{"ip", "link", "add", spec.hostDev, "type", "veth", "peer", "name", spec.guestDev, "netns", guest}},
				step{host, "", []string{"ip", "addr", "add", spec.gw + "/24", "dev", spec.hostDev}},
				step{host, "", []string{"ip", "link", "set", spec.hostDev, "up"}},
				step{guest, "", []string{"ip", "addr", "add", spec.src + "/24", "dev", spec.guestDev}},
				step{guest, "", []string{"ip", "link", "set", spec.guestDev, "up"}},
				step{guest, "", []string{"ip", "route", "add", "default", "via", spec.gw, "dev", spec.guestDev, "table", table}},
				step{guest, "", []string{"ip", "rule", "add", "from", spec.src, "lookup", table}})
		}
	}
	if redirects.Len() > 0 {
		steps = append(steps, step{host, "table ip rbredir {\n\tchain pre {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n" +
			redirects.String() + "\t}\n}\n", []string{"nft", "-f", "-"}})
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
	cert, key, err := bench.SelfSigned(sinkName, netip.MustParseAddr(lab.ServiceAddr))
	if err != nil {
		return w, err
	}
	w.caFile = filepath.Join(dir, "sink.crt")
	keyFile := filepath.Join(dir, "sink.key")
	if err := errors.Join(os.WriteFile(w.caFile, cert, 0o644), os.WriteFile(keyFile, key, 0o600)); err != nil {
		return w, err
	}
	if w.sink, err = w.start(ctx, "sink", inet, 9443, nil, w.exe, cmdSink, "-https", sinkTLS, "-cert", w.caFile, "-key", keyFile, sinkBulk, sinkConns); err != nil {
		return w, err
	}
	if w.model, err = w.start(ctx, "model server", host, modelPort, nil, w.exe, cmdModel, modelLocal, modelDirect); err != nil {
		return w, err
	}
	if w.socks, err = w.start(ctx, "go-socks5", inet, 1082, nil, w.exe, cmdSocks, upstream, lab.ExitAddr); err != nil {
		return w, err
	}
	if w.socksIdle, err = w.start(ctx, "go-socks5 (no splice)", inet, 1083, nil, w.exe, cmdSocks, "-nosplice", upstreamIdle, lab.ExitAddr); err != nil {
		return w, err
	}
	for _, r := range rs {
		if r.proxy == nil {
			continue
		}
		if err := w.startProxy(ctx, r.name, upstream); err != nil {
			return w, err
		}
		if names && (r.name == rowRouter || r.name == rowRouterBase) {
			// The fake IP this router's DNS gives the sink's name, asked from the row's source.
			out, err := exec.CommandContext(ctx, "ip", "netns", "exec", guest, "dig", "+short", "+time=2", "+tries=2",
				"-b", r.src, "@"+lab.ServiceAddr, sinkName).Output()
			a, perr := netip.ParseAddr(strings.TrimSpace(string(out)))
			if err != nil || perr != nil {
				return w, fmt.Errorf("%s: resolve %s through the router: %q: %w", r.name, sinkName, out, errors.Join(err, perr))
			}
			w.fakeIP[r.name] = a
		}
	}
	return w, nil
}

// conns is where row r's connection rows go, and the load's extra flags: the sink's
// address, or with -names the fake IP of its name, with a request naming it.
func (w *world) conns(r row) (target string, flags []string) {
	if a, ok := w.fakeIP[r.name]; ok {
		return netip.AddrPortFrom(a, 9001).String(), []string{"-host", sinkName}
	}
	return sinkConns, nil
}

// fetches is where row r's HTTPS fetches go: the file server's address, or with -names the
// fake IP of its name.
func (w *world) fetches(r row) string {
	if a, ok := w.fakeIP[r.name]; ok {
		return netip.AddrPortFrom(a, 9443).String()
	}
	return sinkTLS
}

// modelAt is where the streamed model replies of the row named row go: a router row's
// forward on its gateway address, for the others the server itself at the host's VM-facing
// address.
func modelAt(row string) (addr string, forward bool) {
	if row == rowRouter || row == rowRouterBase {
		return netip.AddrPortFrom(netip.MustParseAddr(routerSpecOf(row).gw), modelPort).String(), true
	}
	return modelDirect, false
}

// start runs name with args in namespace ns and waits until it listens on port.
// env, when not nil, is added to this process's environment.
func (w *world) start(ctx context.Context, what, ns string, port int, env []string, name string, args ...string) (*lab.Process, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
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

// startProxy starts the proxy of row name, going through upstream up, and records it.
func (w *world) startProxy(ctx context.Context, name, up string) error {
	var p *lab.Process
	var err error
	switch name {
	case rowRedsocks:
		p, err = w.startRedsocks(ctx, up)
	case rowSingbox:
		p, err = w.startSingbox(ctx, up)
	case rowRouter, rowRouterBase:
		p, err = w.startRouter(ctx, routerSpecOf(name), up)
	default:
		return fmt.Errorf("start %s: not a proxy", name)
	}
	if p != nil {
		w.procs[name] = p
	}
	return err
}

func (w *world) startRedsocks(ctx context.Context, up string) (*lab.Process, error) {
	conf := filepath.Join(w.dir, "redsocks.conf")
	host, port, _ := strings.Cut(up, ":")
	text := fmt.Sprintf(`base { log_debug = off; log_info = off; log = stderr; daemon = off; redirector = iptables; }
redsocks { local_ip = 0.0.0.0; local_port = %d; ip = %s; port = %s; type = socks5; }
`, redsocksPort, host, port)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	return w.start(ctx, "redsocks", w.lab.Host().Name(), redsocksPort, nil, "redsocks", "-c", conf)
}

func (w *world) startSingbox(ctx context.Context, up string) (*lab.Process, error) {
	text, err := singboxConfig(singboxPort, up)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(w.dir, "sing-box.json")
	if err := os.WriteFile(conf, text, 0o644); err != nil {
		return nil, err
	}
	return w.start(ctx, "sing-box", w.lab.Host().Name(), singboxPort, nil, w.bins[rowSingbox], "run", "-c", conf)
}

// routerConfig is the config of a router build: it captures only its own guest network, and
// forwards its gateway's modelPort to the model server (modelLocal) for that network.
//
// With names (-names, row router), its one rule allows by name: sinkName only, through the
// proxy; an unnamed flow would fall to the caged end. Otherwise a catch-all sends every flow
// of its network through the proxy.
func routerConfig(s routerSpec, up, logLevel, controlSocket string, names bool) string {
	rule := fmt.Sprintf("sources = [%q]", s.net)
	if names {
		rule = fmt.Sprintf("hosts = [%q]", sinkName)
	}
	return fmt.Sprintf(`# routerbench: the %s row captures only the guest's %s.
[proxy.up]
address = %q

[capture]
vm_networks = [%q]
local = false
listener_port = %d
dns_port = %d
mark = 0x%x
table = %q

[dns]
resolver = "%s:53"

[relay]
idle_timeout = "10m"
connect_timeout = "20s" # the memory rows open thousands of flows at once

[log]
level = %q

[control]
socket = %q

[[forward]]
name = "model"
listen = "%s:%d"
connect = %q
allow = [%q]

[[rule]]
name = "vm"
%s
action = "proxy"
proxy = "up"
`, s.name, s.net, up, s.net, s.port, s.dnsPort, s.mark, s.table, lab.ServiceAddr, logLevel, controlSocket, s.gw, modelPort, modelLocal, s.net, rule)
}

func (w *world) startRouter(ctx context.Context, s routerSpec, up string) (*lab.Process, error) {
	conf := filepath.Join(w.dir, s.name+".toml")
	if err := os.WriteFile(conf, []byte(routerConfig(s, up, w.routerLog, filepath.Join(w.dir, s.name+".sock"), w.names && s.name == rowRouter)), 0o600); err != nil {
		return nil, err
	}
	// The router keeps its last good guard in its state directory: the run's own, not the
	// machine's /var/lib/router.
	state := filepath.Join(w.dir, s.name+"-state")
	env := append([]string{"STATE_DIRECTORY=" + state}, w.routerEnv...)
	return w.start(ctx, s.name, w.lab.Host().Name(), s.port, env, w.bins[s.name], "run", "--config", conf)
}

// restart replaces the proxy of row name with a fresh process going through upstream up.
func (w *world) restart(ctx context.Context, name, up string) (*lab.Process, error) {
	p := w.procs[name]
	if p == nil {
		return nil, fmt.Errorf("restart %s: not a proxy", name)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		return nil, err
	}
	delete(w.procs, name)
	err := w.startProxy(ctx, name, up)
	return w.procs[name], err
}

// close stops every process by PID, then the lab (which also ends whatever is left in its
// namespaces and removes them).
func (w *world) close() error {
	var errs []error
	var ps []*lab.Process
	for _, name := range []string{rowRouter, rowRouterBase, rowSingbox, rowRedsocks} {
		ps = append(ps, w.procs[name])
	}
	for _, p := range append(ps, w.model, w.socksIdle, w.socks, w.sink) {
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
