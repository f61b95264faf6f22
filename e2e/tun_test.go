//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/roottest"
	"github.com/agentcage/router/internal/syncbuf"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/windivert/packet"
	"github.com/agentcage/router/windivert/redirect"
)

// The TUN scene drives the Windows data path (package redirect: reflection, NAT table,
// in-process DNS) through the real Linux TCP stack. In the lab's host namespace:
//
//	tun "rtun0"  192.0.2.1/32, 2001:db8:ffff::1/128 (the address flows are reflected to)
//	table 1042:  203.0.113.0/24, 198.18.0.0/15 (fake-IP pool), 2001:db8:113::/64  dev rtun0
//	rule 100:    not fwmark 0x2a lookup 1042   (IPv4 and IPv6)
//	listeners:   192.0.2.1:47100 and [2001:db8:ffff::1]:47100 (router), 192.0.2.1:47153 (DNS/TCP)
//
// curl in the host namespace (a local app, as on Windows) and curl in the guest (forwarded
// by the host) reach 203.0.113.x and the pool through rtun0; the engine reflects each SYN
// to the listener (as on Windows, where WinDivert re-injects it inbound), the router
// dials through go-socks5, and the engine rewrites the listener's answers back.
//
// In inet, beside the lab's servers: an IPv6 echo server on [2001:db8:113::10]:80 (for the
// direct IPv6 flow) and a bulk server on 203.0.113.12:80 (64 MiB, the throughput figure).
//
// Why a TUN needs no "pass": only the destinations under test are routed into it, and the
// engine runs with ReflectDirect, so a direct verdict is dialed by the router itself.
//
// Why the router's own connections never enter the TUN: its sockets carry mark 0x2a (the
// Control function below), which rule 100 sends to the main table; and its proxy
// (198.51.100.1, on the uplink) is not in table 1042 anyway. The listeners' sockets are
// not marked, so their answers to reflected peers (203.0.113.x, the pool) do enter the TUN.
const (
	tunName      = "rtun0"
	tunAddr      = "192.0.2.1"
	tunAddr6     = "2001:db8:ffff::1"
	tunTable     = "1042"
	ownMark      = 0x2a
	tunListen    = 47100
	tunDNSPort   = 47153
	blockedAddr  = "203.0.113.11"
	echo6Addr    = "2001:db8:113::10"
	bulkAddr     = "203.0.113.12"
	bulkSize     = 64 << 20
	directApp    = "direct-curl"
	blockedApp   = "blocked-curl"
	tunCurlLimit = 5 * time.Second
)

// tunScene is the lab plus the engine, router and DNS server running in this process with
// sockets in the host namespace.
type tunScene struct {
	t    *testing.T
	ctx  context.Context
	lab  *lab.Lab
	eng  *redirect.Engine
	logs *syncbuf.Buffer
	dir  string
}

func TestTUNEngine(t *testing.T) {
	s := newTUNScene(t)
	host, guest := s.lab.Host(), s.lab.Guest()
	hostCurl := func(url string, extra ...string) (string, int) { return s.curl(host, "curl", url, extra...) }

	t.Run("local-proxy", func(t *testing.T) {
		out, code := hostCurl(lab.EchoURL)
		if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
			t.Fatalf("host curl %s: exit %d, %q; want the proxy's exit %s", lab.EchoURL, code, out, lab.ExitAddr)
		}
	})
	t.Run("local-by-name", func(t *testing.T) {
		out, code := hostCurl("http://" + lab.EchoName + "/")
		if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
			t.Fatalf("host curl by name: exit %d, %q", code, out)
		}
		out, code = run(s.ctx, host, "dig", "+short", "+time=2", "+tries=1", "+tcp", "@"+lab.ServiceAddr, lab.EchoName)
		a, err := netip.ParseAddr(strings.TrimSpace(out))
		if code != 0 || err != nil || !netip.MustParsePrefix("198.18.0.0/15").Contains(a) {
			t.Fatalf("dig +tcp: exit %d, %q; want a fake IP answered by the engine", code, out)
		}
	})
	t.Run("forwarded-proxy", func(t *testing.T) {
		for _, url := range []string{lab.EchoURL, "http://" + lab.EchoName + "/"} {
			out, code := s.curl(guest, "curl", url)
			if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
				t.Fatalf("guest curl %s: exit %d, %q; want %s", url, code, out, lab.ExitAddr)
			}
		}
		// The router saw the guest's own address, so the sources rule decided.
		if !wait.Poll(5*time.Second, func() bool {
			return strings.Contains(s.logs.String(), "src="+lab.GuestAddr) && strings.Contains(s.logs.String(), "rule=guest-internet")
		}) {
			t.Fatalf("no flow from %s decided by rule guest-internet in the log", lab.GuestAddr)
		}
	})
	t.Run("block-resets", func(t *testing.T) {
		for _, c := range []struct {
			name string
			ns   *lab.Netns
			bin  string
			url  string
		}{
			{"by-address", host, "curl", "http://" + blockedAddr + "/"},
			{"by-app", host, filepath.Join(s.dir, blockedApp), lab.EchoURL},
			{"forwarded", guest, "curl", "http://" + blockedAddr + "/"},
		} {
			t.Run(c.name, func(t *testing.T) {
				start := time.Now()
				out, code := s.curl(c.ns, c.bin, c.url)
				if took := time.Since(start); code != 7 || took > 2*time.Second {
					t.Fatalf("%s %s: exit %d after %v (%q); want 7 (connection refused) at once", c.bin, c.url, code, took.Round(time.Millisecond), out)
				}
			})
		}
	})
	t.Run("bulk", func(t *testing.T) {
		// 64 MiB down through the engine (both directions of rewriting), the listener and
		// the proxy: every segment is read from and written to the TUN by the engine.
		out, code := hostCurl("http://"+bulkAddr+"/", "-o", "/dev/null", "-w", "%{size_download} %{speed_download}", "--max-time", "60")
		var size, speed float64
		if _, err := fmt.Sscan(out, &size, &speed); code != 0 || err != nil || size != bulkSize {
			t.Fatalf("bulk download: exit %d, %q; want %d bytes", code, out, bulkSize)
		}
		t.Logf("bulk download through the TUN engine: %.0f MiB/s", speed/(1<<20))
	})
	for _, r := range s.lab.HTTPLog() {
		if r.Remote.Addr().String() != lab.ExitAddr {
			t.Errorf("the echo server saw %v, not the proxy's exit address", r)
		}
	}
	hostAddr := netip.MustParseAddr(lab.HostUplinkAddr)
	for _, q := range s.lab.DNSLog() {
		if a := q.Source.Addr(); a == hostAddr || netip.MustParsePrefix(lab.GuestNetwork).Contains(a) || a.String() == tunAddr {
			t.Errorf("the lab's DNS server heard %v: a query escaped the engine", q)
		}
	}
	if l, err := s.lab.Leaks(s.ctx); err != nil {
		t.Fatal(err)
	} else if l.Packets != 0 {
		t.Errorf("%d packets left the host's address outside the proxy (%v)", l.Packets, l)
	}

	// Direct verdicts: the router dials itself (its marked sockets take the main table);
	// these leave from the host's address by design, so they come after the leak check.
	t.Run("direct", func(t *testing.T) {
		bin := filepath.Join(s.dir, directApp)
		out, code := s.curl(host, bin, lab.EchoURL)
		if code != 0 || strings.TrimSpace(out) != lab.HostUplinkAddr {
			t.Errorf("%s %s: exit %d, %q; want the host's own address %s", directApp, lab.EchoURL, code, out, lab.HostUplinkAddr)
		}
		out, code = s.curl(host, bin, "http://["+echo6Addr+"]/")
		if code != 0 || strings.TrimSpace(out) != lab.HostUplinkAddr6 {
			t.Errorf("%s over IPv6: exit %d, %q; want %s", directApp, code, out, lab.HostUplinkAddr6)
		}
	})

	st := s.eng.Stats()
	t.Logf("engine: %+v", st)
	// Reflected: 2 local, 2 forwarded, 1 DNS over TCP, 2 direct.
	if st.Reflected < 7 || st.Refused < 3 || st.DNSAnswered < 4 || st.WriteErrors != 0 || st.Unknown != 0 {
		t.Errorf("engine stats %+v: want ≥ 7 reflected, ≥ 3 refused, ≥ 4 DNS answers, no write errors, no unknown segments", st)
	}
}

func newTUNScene(t *testing.T) *tunScene {
	t.Helper()
	roottest.Require(t, tools...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	l, err := lab.New(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	s := &tunScene{t: t, ctx: ctx, lab: l, logs: &syncbuf.Buffer{}, dir: t.TempDir()}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("engine and router log:\n%s", s.logs.String())
			t.Logf("lab:\n%s", l.Diagnostics(context.Background()))
		}
		if err := l.Close(); err != nil {
			t.Errorf("lab close: %v", err)
		}
	})
	host := l.Host()

	// The TUN and its routes.
	var tun *redirect.TUN
	if err := host.Do(func() error {
		var err error
		tun, err = redirect.OpenTUN(tunName)
		return err
	}); err != nil {
		t.Fatalf("tun: %v", err)
	}
	closeTUN := true
	defer func() {
		if closeTUN {
			tun.Close()
		}
	}()
	for _, args := range [][]string{
		{"addr", "add", tunAddr + "/32", "dev", tunName},
		{"-6", "addr", "add", tunAddr6 + "/128", "dev", tunName, "nodad"},
		{"link", "set", tunName, "up"},
		{"route", "add", "203.0.113.0/24", "dev", tunName, "src", tunAddr, "table", tunTable},
		{"route", "add", "198.18.0.0/15", "dev", tunName, "src", tunAddr, "table", tunTable},
		{"-6", "route", "add", "2001:db8:113::/64", "dev", tunName, "src", tunAddr6, "table", tunTable},
		{"rule", "add", "not", "fwmark", fmt.Sprint(ownMark), "lookup", tunTable, "pref", "100"},
		{"-6", "rule", "add", "not", "fwmark", fmt.Sprint(ownMark), "lookup", tunTable, "pref", "100"},
	} {
		if out, err := host.Run(ctx, "ip", args...); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Reflected packets arrive on rtun0 from internet addresses: no reverse-path filter.
	if err := host.Do(func() error {
		for _, dev := range []string{"all", "default", tunName} {
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+dev+"/rp_filter", []byte("0"), 0o644); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("rp_filter: %v", err)
	}
	// An IPv6 echo server on the internet side, for the direct IPv6 flow.
	if out, err := l.Inet().Run(ctx, "ip", "-6", "addr", "add", echo6Addr+"/128", "dev", "lo"); err != nil {
		t.Fatalf("inet address: %v\n%s", err, out)
	}
	ln6, err := l.Inet().Listen(ctx, "tcp", "["+echo6Addr+"]:80")
	if err != nil {
		t.Fatal(err)
	}
	srv6 := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ap, _ := netip.ParseAddrPort(r.RemoteAddr)
		fmt.Fprintln(w, ap.Addr())
	})}
	go srv6.Serve(ln6)
	t.Cleanup(func() { srv6.Close() })

	// A bulk server on the internet side.
	if out, err := l.Inet().Run(ctx, "ip", "addr", "add", bulkAddr+"/32", "dev", "lo"); err != nil {
		t.Fatalf("inet address: %v\n%s", err, out)
	}
	lnBulk, err := l.Inet().Listen(ctx, "tcp", bulkAddr+":80")
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	srvBulk := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(bulkSize))
		for range bulkSize / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})}
	go srvBulk.Serve(lnBulk)
	t.Cleanup(func() { srvBulk.Close() })

	for _, name := range []string{directApp, blockedApp} {
		copyBinary(t, "curl", filepath.Join(s.dir, name))
	}

	log := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	host6 := func(sx string) rules.Host {
		h, err := rules.ParseHost(sx)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	rs := []rules.Rule{
		{Name: "direct-app", Apps: []rules.App{rules.MustApp(directApp)}, Action: rules.Direct},
		{Name: "blocked-app", Apps: []rules.App{rules.MustApp(blockedApp)}, Action: rules.Block},
		{Name: "blocked", Hosts: []rules.Host{host6(blockedAddr)}, Action: rules.Block},
		// The guest's flows come in reflected: only the engine knows their real source.
		{Name: "guest-internet", Sources: []rules.IPRange{rules.RangeOfPrefix(netip.MustParsePrefix(lab.GuestNetwork))}, Hosts: []rules.Host{host6("203.0.113.0/24"), host6("*.lab.test")}, Action: rules.Proxy, Proxy: "exit"},
		{Name: "internet", Hosts: []rules.Host{host6("203.0.113.0/24"), host6("*.lab.test")}, Action: rules.Proxy, Proxy: "exit"},
		{Name: "default", Action: rules.Direct},
	}
	vmNets := []netip.Prefix{netip.MustParsePrefix(lab.GuestNetwork)}
	// One decision for the engine and the router, with the DNS server's (default) pool.
	dec := policy.New(&conf.Config{Rules: rs, Capture: conf.Capture{VMNetworks: vmNets},
		DNS: conf.DNS{Mode: conf.DNSFakeIP, Capture: conf.DNSCaptureAll, Pool: conf.DefaultPool()}}, policy.Env{})

	// The router and the DNS server, with their sockets in the host namespace.
	var r *router.Router
	dnsSrv, err := dns.New(dns.Config{Mode: dns.ModeFakeIP, Resolver: lab.DNSAddr}, dns.Dialers{
		Proxy: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return r.DialUpstream(ctx, "exit", addr)
		},
	}, log.With("component", "dns"))
	if err != nil {
		t.Fatal(err)
	}
	finder := proc.NewLinuxFinder(proc.LinuxFinderConfig{Logger: log})
	eng, err := redirect.New(tun, dec, redirect.Options{
		Log:           log.With("component", "redirect"),
		ListenerPort:  tunListen,
		DNSPort:       tunDNSPort,
		DNS:           dnsSrv,
		Names:         dnsSrv,
		ReflectTo:     []netip.Addr{netip.MustParseAddr(tunAddr), netip.MustParseAddr(tunAddr6)},
		ReflectDirect: true,
		Lookup: func(proto uint8, local, remote netip.AddrPort) (rules.Owner, error) {
			if proto != packet.ProtoTCP {
				return rules.Owner{}, errors.New("tcp only")
			}
			var info rules.Owner
			var lerr error
			err := host.Do(func() error { // sock_diag answers for the calling thread's namespace
				info, lerr = finder.LookupTCP(local, remote)
				return nil
			})
			return info, errors.Join(err, lerr)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.eng = eng
	gp, _ := netip.ParseAddrPort(lab.GoSocksAddr)
	r, err = router.New(router.Settings{
		Decision:       dec,
		Upstreams:      []router.UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: gp.Addr().String(), Port: gp.Port()}}},
		IdleTimeout:    time.Minute,
		ConnectTimeout: 3 * time.Second,
	}, router.Options{
		Log:      log.With("component", "router"),
		Original: eng.Original,
		Owner: func(c *net.TCPConn, _, dst netip.AddrPort) (rules.Owner, error) {
			return eng.Owner(c.RemoteAddr().(*net.TCPAddr).AddrPort(), dst)
		},
		Control: netnsControl(host, ownMark),
		Names:   dnsSrv,
	})
	if err != nil {
		t.Fatal(err)
	}

	var lns []*net.TCPListener
	for _, a := range []string{net.JoinHostPort(tunAddr, fmt.Sprint(tunListen)), net.JoinHostPort(tunAddr6, fmt.Sprint(tunListen))} {
		ln, err := host.Listen(ctx, "tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln.(*net.TCPListener))
	}
	dnsLn, err := host.Listen(ctx, "tcp", net.JoinHostPort(tunAddr, fmt.Sprint(tunDNSPort)))
	if err != nil {
		t.Fatal(err)
	}

	rctx, stop := context.WithCancel(context.Background())
	var waits []<-chan struct{}
	goDone := func(f func()) {
		c := make(chan struct{})
		waits = append(waits, c)
		go func() { defer close(c); f() }()
	}
	goDone(func() {
		if err := eng.Run(rctx); err != nil {
			t.Errorf("engine: %v", err)
		}
	})
	for _, ln := range lns {
		goDone(func() {
			if err := r.Serve(rctx, ln); err != nil {
				t.Errorf("router: %v", err)
			}
		})
	}
	goDone(func() {
		if err := dnsSrv.Serve(rctx, nil, dnsLn); err != nil {
			t.Errorf("dns: %v", err)
		}
	})
	closeTUN = false // the engine owns it now
	t.Cleanup(func() {
		stop()
		for _, w := range waits {
			select {
			case <-w:
			case <-time.After(10 * time.Second):
				t.Errorf("a serving goroutine did not stop")
			}
		}
		r.Wait()
		r.Close()
		dnsSrv.Close()
	})
	// Setup traffic (none should have reached the uplink) is behind us.
	if err := l.ResetLeaks(ctx); err != nil {
		t.Fatal(err)
	}
	l.ResetLogs()
	return s
}

// curl runs bin (curl or a copy) in ns against url; a refused connection is exit 7.
func (s *tunScene) curl(ns *lab.Netns, bin, url string, extra ...string) (string, int) {
	args := append([]string{"-sS", "--max-time", fmt.Sprint(int(tunCurlLimit / time.Second))}, extra...)
	return run(s.ctx, ns, bin, append(args, url)...)
}

// copyBinary copies the executable named bin (looked up in PATH) to dst, so that rules can
// tell it by name.
func copyBinary(t *testing.T, bin, dst string) {
	t.Helper()
	src, err := exec.LookPath(bin)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// netnsControl makes the router's sockets in ns, marked: Go creates a socket on whatever
// thread dials (in this process's own namespace), so the Control function, which runs
// after socket() and before connect() and before the socket is registered with the poller,
// replaces the descriptor with a socket of the same kind created inside ns (dup3 over the
// same number) and marks it.
func netnsControl(ns *lab.Netns, mark int) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = replaceInNetns(ns, int(fd), mark) }); cerr != nil {
			return cerr
		}
		return err
	}
}

func replaceInNetns(ns *lab.Netns, fd, mark int) error {
	domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return fmt.Errorf("socket domain: %w", err)
	}
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return fmt.Errorf("socket type: %w", err)
	}
	proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err != nil {
		return fmt.Errorf("socket protocol: %w", err)
	}
	v6only := -1
	if domain == unix.AF_INET6 {
		if v6only, err = unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY); err != nil {
			return fmt.Errorf("v6only: %w", err)
		}
	}
	return ns.Do(func() error {
		nfd, err := unix.Socket(domain, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("socket in %s: %w", ns.Name(), err)
		}
		defer unix.Close(nfd)
		if v6only >= 0 {
			if err := unix.SetsockoptInt(nfd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v6only); err != nil {
				return fmt.Errorf("v6only: %w", err)
			}
		}
		if err := unix.SetsockoptInt(nfd, unix.SOL_SOCKET, unix.SO_MARK, mark); err != nil {
			return fmt.Errorf("mark: %w", err)
		}
		if err := unix.Dup3(nfd, fd, unix.O_CLOEXEC); err != nil {
			return fmt.Errorf("dup3: %w", err)
		}
		return nil
	})
}
