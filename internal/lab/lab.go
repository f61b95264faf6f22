package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Options tune a Lab. The zero value is a complete lab.
type Options struct {
	// Logf hears progress (setup steps, teardown, cleanup of stale labs); nil discards. It is
	// called only from New, Close and Cleanup on the caller's goroutine, never from server
	// goroutines, so testing.T.Logf fits.
	Logf func(format string, args ...any)
	// SocksUser, when not empty, makes go-socks5 demand RFC 1929 user/password
	// authentication with SocksPassword. Dante never asks.
	SocksUser, SocksPassword string
	// ModelGap is the pause after each streamed event of the model server (default 50 ms);
	// ModelEvents the number of content events per stream (default 5).
	ModelGap    time.Duration
	ModelEvents int
	// RunTimeout bounds each setup command and each Netns.Run (default 30 s).
	RunTimeout time.Duration
}

// Lab is a running lab. Its methods are safe for concurrent use. Close ends it; afterwards the
// namespaces are gone, the accessors of the logs keep returning what was recorded, and the
// methods that touch the namespaces return errors.
type Lab struct {
	id         string
	logf       func(format string, args ...any)
	runTimeout time.Duration

	inet, host, guest *Netns

	httpLog  record[HTTPRequest]
	dnsLog   record[DNSQuery]
	udpLog   record[UDPPacket]
	modelLog record[ModelStream]
	socksLog record[string] // go-socks5 errors, accept errors

	dante *Process // set once by New

	mu     sync.Mutex     // guards undo and closed
	undo   []func() error // teardown steps, run last to first
	closed bool
}

// New builds a lab: namespaces, links, addresses, routes, sysctls, nftables, and the servers
// listed in the package comment. It first removes stale labs (see Cleanup). It needs root and
// the tools ip, nft and danted. ctx bounds the setup only; the lab lives until Close. If any
// step fails, New tears down what it built and returns the error.
func New(ctx context.Context, opts Options) (*Lab, error) {
	if !supported {
		return nil, errors.New("lab: network namespaces need linux")
	}
	if !isRoot() {
		return nil, errors.New("lab: needs root (network namespaces, nftables)")
	}
	for _, tool := range []string{"ip", "nft", "danted"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("lab: %s not found (Debian: apt-get install iproute2 nftables dante-server): %w", tool, err)
		}
	}
	l := &Lab{
		id:         fmt.Sprintf("rl%d-%04x", os.Getpid(), rand.N(0x10000)),
		logf:       opts.Logf,
		runTimeout: opts.RunTimeout,
	}
	if l.logf == nil {
		l.logf = func(string, ...any) {}
	}
	if l.runTimeout <= 0 {
		l.runTimeout = 30 * time.Second
	}
	if opts.ModelGap <= 0 {
		opts.ModelGap = 50 * time.Millisecond
	}
	if opts.ModelEvents <= 0 {
		opts.ModelEvents = 5
	}
	if err := Cleanup(ctx, l.logf); err != nil {
		l.logf("lab: cleanup of stale labs: %v", err)
	}
	start := time.Now()
	if err := l.build(ctx, opts); err != nil {
		l.logf("lab %s: setup failed: %v", l.id, err)
		return nil, errors.Join(fmt.Errorf("lab setup: %w", err), l.Close())
	}
	l.logf("lab %s: up in %v", l.id, time.Since(start).Round(time.Millisecond))
	return l, nil
}

func (l *Lab) build(ctx context.Context, opts Options) error {
	if err := l.buildNetwork(ctx); err != nil {
		return err
	}
	if err := l.startInetServers(ctx, opts); err != nil {
		return err
	}
	if err := l.startDante(ctx); err != nil {
		return err
	}
	return l.startModel(ctx, modelConfig{gap: opts.ModelGap, events: opts.ModelEvents})
}

// addUndo registers a teardown step.
func (l *Lab) addUndo(f func() error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.undo = append(l.undo, f)
}

func (l *Lab) run(ctx context.Context, stdin string, name string, args ...string) error {
	_, err := runCmd(ctx, l.runTimeout, stdin, name, args...)
	return err
}

func (l *Lab) buildNetwork(ctx context.Context) error {
	names := map[string]string{}
	for _, role := range []string{"inet", "host", "guest"} {
		name := l.id + "-" + role
		names[role] = name
		// Registered first: `ip netns add` may be interrupted after it created the namespace.
		l.addUndo(func() error {
			if _, err := os.Stat(filepath.Join(netnsRunDir, name)); errors.Is(err, os.ErrNotExist) {
				return nil
			}
			var errs []error
			// Whatever still runs inside (a router a test did not stop) would keep the
			// namespace alive unseen.
			if err := endProcessesIn(context.Background(), name, l.logf); err != nil {
				errs = append(errs, err)
			}
			if _, err := runCmd(context.Background(), l.runTimeout, "", "ip", "netns", "del", name); err != nil {
				errs = append(errs, fmt.Errorf("delete namespace: %w", err))
			}
			return errors.Join(errs...)
		})
		if err := l.run(ctx, "", "ip", "netns", "add", name); err != nil {
			return fmt.Errorf("create namespace: %w", err)
		}
		dir := filepath.Join(etcNetnsDir, name)
		l.addUndo(func() error { return os.RemoveAll(dir) })
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("resolver directory: %w", err)
		}
		resolv := fmt.Sprintf("# written by the router lab\nnameserver %s\noptions timeout:2 attempts:2\n", ServiceAddr)
		if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(resolv), 0o644); err != nil {
			return fmt.Errorf("resolver file: %w", err)
		}
		ns, err := newNetns(name, l.runTimeout)
		if err != nil {
			return err
		}
		l.addUndo(ns.close)
		switch role {
		case "inet":
			l.inet = ns
		case "host":
			l.host = ns
		case "guest":
			l.guest = ns
		}
	}
	l.logf("lab %s: namespaces %s, %s, %s", l.id, names["inet"], names["host"], names["guest"])

	// Veths are created inside the namespaces: nothing touches the process's own namespace.
	batches := []struct{ ns, cmds string }{
		{names["host"], fmt.Sprintf(`link add %s type veth peer name %s netns %s
link add %s type veth peer name %s netns %s
`, HostUplinkDev, InetUplinkDev, names["inet"], HostVMDev, GuestDev, names["guest"])},
		{names["inet"], fmt.Sprintf(`link set lo up
addr add %s/32 dev lo
addr add %s/32 dev lo
addr add %s/24 dev %s
addr add %s/64 dev %s nodad
link set %s up
`, ServiceAddr, ExitAddr, InetUplinkAddr, InetUplinkDev, InetUplinkAddr6, InetUplinkDev, InetUplinkDev)},
		{names["host"], fmt.Sprintf(`link set lo up
addr add %s/24 dev %s
addr add %s/64 dev %s nodad
addr add %s/24 dev %s
link set %s up
link set %s up
route add default via %s
route add ::/0 via %s
`, HostUplinkAddr, HostUplinkDev, HostUplinkAddr6, HostUplinkDev, GatewayAddr, HostVMDev,
			HostUplinkDev, HostVMDev, InetUplinkAddr, InetUplinkAddr6)},
		{names["guest"], fmt.Sprintf(`link set lo up
addr add %s/24 dev %s
link set %s up
route add default via %s
`, GuestAddr, GuestDev, GuestDev, GatewayAddr)},
	}
	for _, b := range batches {
		if err := l.run(ctx, b.cmds, "ip", "-n", b.ns, "-batch", "-"); err != nil {
			return fmt.Errorf("wire namespace %s: %w", b.ns, err)
		}
	}

	common := map[string]string{
		"net/ipv4/ip_local_port_range": "1024 65000",
		"net/ipv4/tcp_tw_reuse":        "1",
		"net/core/somaxconn":           "4096",
	}
	extra := map[*Netns]map[string]string{
		l.inet: {"net/ipv4/tcp_max_tw_buckets": "0"}, // no PAWS stalls, see anchors/perf.md
		l.host: {"net/ipv4/ip_forward": "1"},
	}
	for _, ns := range []*Netns{l.inet, l.host, l.guest} {
		if err := ns.Do(func() error {
			for _, set := range []map[string]string{common, extra[ns]} {
				for key, value := range set {
					if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
						return fmt.Errorf("sysctl %s: %w", key, err)
					}
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}

	if err := l.run(ctx, leakRuleset(), "ip", "netns", "exec", names["inet"], "nft", "-f", "-"); err != nil {
		return fmt.Errorf("leak counter: %w", err)
	}
	if err := l.run(ctx, natRuleset(), "ip", "netns", "exec", names["host"], "nft", "-f", "-"); err != nil {
		return fmt.Errorf("hypervisor nat: %w", err)
	}
	return nil
}

func (l *Lab) startInetServers(ctx context.Context, opts Options) error {
	// IP echo.
	ln, err := l.inet.Listen(ctx, "tcp", ServiceAddr+":80")
	if err != nil {
		return err
	}
	l.serveHTTP(ln, echoHandler(&l.httpLog))

	// DNS, UDP and TCP.
	pc, err := l.inet.ListenPacket(ctx, "udp", DNSAddr)
	if err != nil {
		return err
	}
	if err := l.serveDNS(ctx, &dns.Server{PacketConn: pc, Handler: dnsHandler(&l.dnsLog)}); err != nil {
		return err
	}
	ln, err = l.inet.Listen(ctx, "tcp", DNSAddr)
	if err != nil {
		return err
	}
	if err := l.serveDNS(ctx, &dns.Server{Listener: ln, Handler: dnsHandler(&l.dnsLog)}); err != nil {
		return err
	}

	// UDP echo.
	pc, err = l.inet.ListenPacket(ctx, "udp", UDPEchoAddr)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { defer close(done); serveUDPEcho(pc, &l.udpLog) }()
	l.addUndo(func() error {
		err := pc.Close()
		<-done
		return err
	})

	// go-socks5.
	ln, err = l.inet.Listen(ctx, "tcp", GoSocksAddr)
	if err != nil {
		return err
	}
	srv := newGoSocks(l.inet, opts.SocksUser, opts.SocksPassword, &l.socksLog)
	cs := startConnServer(ln, srv.ServeConn, &l.socksLog)
	l.addUndo(cs.close)
	l.logf("lab %s: echo, dns, udp echo and go-socks5 serving in %s", l.id, l.inet.Name())
	return nil
}

// serveHTTP serves h on ln until Close.
func (l *Lab) serveHTTP(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	l.addUndo(func() error {
		err := srv.Close()
		<-done
		return err
	})
}

// serveDNS starts srv (with its Listener or PacketConn set) and waits until it serves.
func (l *Lab) serveDNS(ctx context.Context, srv *dns.Server) error {
	closeSockets := func() {
		if srv.Listener != nil {
			srv.Listener.Close()
		}
		if srv.PacketConn != nil {
			srv.PacketConn.Close()
		}
	}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan error, 1)
	go func() { done <- srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-done:
		closeSockets()
		return fmt.Errorf("dns server: %w", err)
	case <-ctx.Done():
		// It may still start; shut it down when it does.
		go func() {
			select {
			case <-started:
				_ = srv.Shutdown()
			case <-done:
				closeSockets()
			}
		}()
		return fmt.Errorf("dns server: %w", ctx.Err())
	}
	l.addUndo(func() error {
		err := srv.Shutdown()
		<-done
		return err
	})
	return nil
}

func (l *Lab) startDante(ctx context.Context) error {
	dir, err := os.MkdirTemp("", l.id+"-dante-")
	if err != nil {
		return fmt.Errorf("dante directory: %w", err)
	}
	l.addUndo(func() error { return os.RemoveAll(dir) })
	conf := filepath.Join(dir, "danted.conf")
	if err := os.WriteFile(conf, []byte(danteConfig()), 0o644); err != nil {
		return fmt.Errorf("dante config: %w", err)
	}
	// Not bound to ctx: the lab stops it.
	cmd := exec.Command("ip", "netns", "exec", l.inet.Name(), "danted", "-f", conf, "-p", filepath.Join(dir, "danted.pid"))
	p, err := StartProcess("danted", cmd)
	if err != nil {
		return err
	}
	l.dante = p
	l.addUndo(func() error {
		start := time.Now()
		err := p.Stop(300 * time.Millisecond)
		l.logf("lab %s: danted stopped in %v", l.id, time.Since(start).Round(time.Millisecond))
		return err
	})

	// Ready when it accepts.
	deadline := time.Now().Add(10 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		c, err := l.inet.Dial(dctx, "tcp", DanteAddr)
		cancel()
		if err == nil {
			c.Close()
			break
		}
		if done, err := p.Exited(); done {
			return fmt.Errorf("danted exited at start (%v):\n%s", err, p.Output())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("danted does not accept on %s: %w\n%s", DanteAddr, err, p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.logf("lab %s: danted pid %d serving on %s", l.id, p.PID(), DanteAddr)
	return nil
}

func (l *Lab) startModel(ctx context.Context, cfg modelConfig) error {
	ln, err := l.host.Listen(ctx, "tcp", ModelAddr)
	if err != nil {
		return err
	}
	l.serveHTTP(ln, modelHandler(cfg, &l.modelLog))
	l.logf("lab %s: model server on %s in %s", l.id, ModelAddr, l.host.Name())
	return nil
}

// Close tears the lab down: servers, danted (and its children), whatever else still runs in
// the namespaces (SIGKILL by PID), the namespaces, /etc/netns/<name> and the temporary files.
// It returns every error met and carries on past each. A second Close does nothing and returns
// nil.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	undo := l.undo
	l.undo = nil
	l.mu.Unlock()
	start := time.Now()
	var errs []error
	for i := len(undo) - 1; i >= 0; i-- {
		if err := undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	l.logf("lab %s: closed in %v", l.id, time.Since(start).Round(time.Millisecond))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lab close: %w", err)
	}
	return nil
}

// ID is the lab's name prefix, e.g. "rl4242-0f3a"; the namespaces are ID()+"-inet" etc.
func (l *Lab) ID() string { return l.id }

// Inet is the internet namespace (servers, proxies, leak counter).
func (l *Lab) Inet() *Netns { return l.inet }

// Host is the hypervisor host namespace (NAT, model server; the router runs here).
func (l *Lab) Host() *Netns { return l.host }

// Guest is the VM namespace.
func (l *Lab) Guest() *Netns { return l.guest }

// DantePID is the PID of the danted main process (0 before it started).
func (l *Lab) DantePID() int {
	if l.dante == nil {
		return 0
	}
	return l.dante.PID()
}

// DanteOutput is the last 64 KiB of danted's stderr and stdout.
func (l *Lab) DanteOutput() string {
	if l.dante == nil {
		return ""
	}
	return l.dante.Output()
}

// HTTPLog returns a copy of the echo server's request log, oldest first.
func (l *Lab) HTTPLog() []HTTPRequest { return l.httpLog.snapshot() }

// DNSLog returns a copy of the DNS server's query log, oldest first.
func (l *Lab) DNSLog() []DNSQuery { return l.dnsLog.snapshot() }

// UDPLog returns a copy of the UDP echo server's log, oldest first.
func (l *Lab) UDPLog() []UDPPacket { return l.udpLog.snapshot() }

// ModelLog returns a copy of the streams the model server sent, in order of completion.
func (l *Lab) ModelLog() []ModelStream {
	streams := l.modelLog.snapshot()
	for i := range streams {
		streams[i].Sent = append([]time.Time(nil), streams[i].Sent...)
	}
	return streams
}

// SocksLog returns a copy of go-socks5's error log (failed handshakes, dials, resets).
func (l *Lab) SocksLog() []string { return l.socksLog.snapshot() }

// ResetLogs empties the server logs (not danted's output).
func (l *Lab) ResetLogs() {
	l.httpLog.reset()
	l.dnsLog.reset()
	l.udpLog.reset()
	l.modelLog.reset()
	l.socksLog.reset()
}

// Leaks reads the leak counters of the inet namespace: packets that arrived on the uplink from
// the host's address or the guest subnet (or any global IPv6 source) and are not TCP to the
// proxies (GoSocksAddr, DanteAddr). Add ports to the nft set inet rl_leak proxy_ports to
// exempt more proxies.
func (l *Lab) Leaks(ctx context.Context) (Leaks, error) {
	out, err := l.inet.Run(ctx, "nft", "-j", "list", "counters", "table", "inet", LeakTable)
	if err != nil {
		return Leaks{}, fmt.Errorf("read leak counters: %w", err)
	}
	return parseLeaks(out)
}

// LeakPackets is Leaks(ctx).Packets.
func (l *Lab) LeakPackets(ctx context.Context) (uint64, error) {
	lk, err := l.Leaks(ctx)
	return lk.Packets, err
}

// ResetLeaks sets the leak counters to zero.
func (l *Lab) ResetLeaks(ctx context.Context) error {
	if _, err := l.inet.Run(ctx, "nft", "reset", "counters", "table", "inet", LeakTable); err != nil {
		return fmt.Errorf("reset leak counters: %w", err)
	}
	return nil
}

// RemoveHypervisorNAT deletes the host's masquerade (table ip hvnat): guest traffic is then
// forwarded with its own source address, and inet has no route back. Idempotent.
func (l *Lab) RemoveHypervisorNAT(ctx context.Context) error {
	if err := l.run(ctx, natRemove(), "ip", "netns", "exec", l.host.Name(), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("remove hypervisor nat: %w", err)
	}
	return nil
}

// RestoreHypervisorNAT puts the host's masquerade back (replacing it if present).
func (l *Lab) RestoreHypervisorNAT(ctx context.Context) error {
	if err := l.run(ctx, natRuleset(), "ip", "netns", "exec", l.host.Name(), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("restore hypervisor nat: %w", err)
	}
	return nil
}

// Diagnostics describes the lab's state for a failure message: per namespace the addresses,
// routes and nft ruleset; the leak counters; every server log; go-socks5's errors and danted's
// output. It never fails: what cannot be read is reported inline.
func (l *Lab) Diagnostics(ctx context.Context) string {
	var b strings.Builder
	fmt.Fprintf(&b, "==== lab %s diagnostics\n", l.id)
	for _, ns := range []*Netns{l.inet, l.host, l.guest} {
		if ns == nil {
			continue
		}
		for _, args := range [][]string{
			{"ip", "-br", "addr"},
			{"ip", "route"},
			{"ip", "-6", "route"},
			{"nft", "list", "ruleset"},
		} {
			out, err := ns.Run(ctx, args[0], args[1:]...)
			fmt.Fprintf(&b, "---- %s: %s\n%s", ns.Name(), strings.Join(args, " "), out)
			if err != nil {
				fmt.Fprintf(&b, "(error: %v)\n", err)
			}
		}
	}
	if l.inet != nil {
		lk, err := l.Leaks(ctx)
		fmt.Fprintf(&b, "---- leaks: %v (err %v)\n", lk, err)
	}
	section := func(title string, lines []string) {
		fmt.Fprintf(&b, "---- %s (%d)\n", title, len(lines))
		if len(lines) > 200 {
			fmt.Fprintf(&b, "... %d older entries left out\n", len(lines)-200)
			lines = lines[len(lines)-200:]
		}
		for _, s := range lines {
			b.WriteString(s)
			b.WriteByte('\n')
		}
	}
	section("http echo log", stringsOf(l.HTTPLog()))
	section("dns log", stringsOf(l.DNSLog()))
	section("udp echo log", stringsOf(l.UDPLog()))
	section("model streams", stringsOf(l.ModelLog()))
	section("go-socks5 errors", l.SocksLog())
	fmt.Fprintf(&b, "---- danted output (pid %d)\n%s\n", l.DantePID(), l.DanteOutput())
	return b.String()
}

func stringsOf[T fmt.Stringer](items []T) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.String()
	}
	return out
}
