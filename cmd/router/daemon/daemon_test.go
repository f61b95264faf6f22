package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/router/capture/capturetest"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

func TestRouterPolicy(t *testing.T) {
	cfg := capturetest.Parse(t, capturetest.Base)
	p := routerPolicy(cfg, policy.New(cfg, policy.Env{}))
	if len(p.Upstreams) != 1 {
		t.Fatalf("upstreams %+v", p.Upstreams)
	}
	u := p.Upstreams[0]
	if u.Name != "exit" || u.Host != "198.51.100.1" || u.Port != 1080 || u.Username != "u" || u.Password != "pw" || u.Pipeline {
		t.Errorf("upstream %+v", u)
	}
	f := policy.Flow{Src: netip.MustParseAddr("10.0.2.15"), Dst: netip.MustParseAddr("198.51.100.9"), Port: 443}
	if d := p.Decision.Decide(&f); d.Name != "all" || len(p.Decision.VMNetworks()) != 1 || p.IdleTimeout != conf.DefaultIdleTimeout {
		t.Errorf("policy %+v decides %+v", p, d)
	}
	if f := forwardOf(cfg.Forwards[0]); f.Name != "10.0.2.2:47831" {
		t.Errorf("an unnamed forward is named %q, want its listen address", f.Name)
	}
}

func TestRestartNeeded(t *testing.T) {
	old := capturetest.Parse(t, capturetest.Base)
	for _, tt := range []struct {
		change string
		want   string // "" when a reload may apply it
	}{
		{`[[rule]]` + "\nname = \"more\"\naction = \"block\"\n", ""},
		{"[relay]\nidle_timeout = \"1h\"\n", ""},
		{"[dns]\nmode = \"proxy\"\n", "dns"},
		{"[control]\nsocket = \"/tmp/x.sock\"\n", "control"},
	} {
		err := restartNeeded(old, capturetest.Parse(t, capturetest.Base+tt.change))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v", tt.change, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: got %v, want an error naming %s", tt.change, err, tt.want)
		}
	}
	cur := capturetest.Parse(t, strings.Replace(capturetest.Base, "[capture]\n", "[capture]\nlistener_port = 4000\nmark = 7\n", 1))
	if err := restartNeeded(old, cur); err == nil || !strings.Contains(err.Error(), "capture.listener_port") || !strings.Contains(err.Error(), "capture.mark") {
		t.Errorf("got %v", err)
	}
}

// freePort returns a TCP and UDP port that was free on every address a moment ago.
func freePort(t *testing.T) uint16 {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "[::]:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		pc, err := net.ListenPacket("udp", fmt.Sprintf("[::]:%d", port))
		if err != nil {
			continue
		}
		pc.Close()
		return uint16(port)
	}
	t.Fatal("no free port")
	return 0
}

// freePorts returns n distinct ports, each free as freePort's: ports picked one after the
// other may repeat, as the system hands a port closed a moment ago out again.
func freePorts(t *testing.T, n int) []uint16 {
	t.Helper()
	var ports []uint16
	seen := map[uint16]bool{}
	for range 20 * n {
		if p := freePort(t); !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
		if len(ports) == n {
			return ports
		}
	}
	t.Fatalf("no %d distinct free ports", n)
	return nil
}

// scene is a config file for a daemon on loopback: its listener and DNS ports, its control
// socket, a forward to an echo target, written anew by write.
type scene struct {
	t       *testing.T
	dir     string
	path    string
	lport   uint16
	dport   uint16
	fwd     netip.AddrPort // the forward's listen address
	target  netip.AddrPort // what the forward connects to
	control string
}

func newScene(t *testing.T) *scene {
	t.Helper()
	dir := t.TempDir()
	ports := freePorts(t, 3)
	s := &scene{t: t, dir: dir, path: filepath.Join(dir, "router.toml"), lport: ports[0], dport: ports[1],
		control: filepath.Join(dir, "ctl", "control.sock")}
	s.fwd = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ports[2])
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "model\n")
			c.Close()
		}
	}()
	s.target = ln.Addr().(*net.TCPAddr).AddrPort()
	return s
}

// text is the scene's config with the forward allowing allow, plus extra.
func (s *scene) text(allow, extra string) string {
	return fmt.Sprintf(`
[proxy.exit]
address = "127.0.0.1:9"
[capture]
vm_networks = ["10.0.2.0/24"]
listener_port = %d
dns_port = %d
[control]
socket = %q
[[forward]]
name = "model"
listen = %q
connect = %q
allow = [%q]
api = "tcp" # the target greets: these tests reload the forward, not its API
[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"
%s`, s.lport, s.dport, s.control, s.fwd, s.target, allow, extra)
}

func (s *scene) write(text string) {
	s.t.Helper()
	if err := os.WriteFile(s.path, []byte(text), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

func (s *scene) daemon(pf capture.Platform, load func(string) (*conf.Config, error)) *daemon {
	opts := Options{ConfigPath: s.path, Platform: pf, Log: slog.New(slog.DiscardHandler), Grace: time.Second, Load: load}
	if opts.Load == nil {
		opts.Load = func(path string) (*conf.Config, error) { return conf.Load(path, conf.Options{}) }
	}
	return &daemon{opts: opts, log: opts.Log, forwards: map[string]*forwardRun{}}
}

// start starts d on the scene's file; the daemon stops when the test ends.
func (s *scene) start(d *daemon) {
	s.t.Helper()
	cfg, err := d.opts.Load(s.path)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := d.start(context.Background(), cfg); err != nil {
		d.stop()
		s.t.Fatal(err)
	}
	s.t.Cleanup(d.stop)
}

// banner connects to the forward and returns what it says ("" when refused).
func banner(t *testing.T, addr netip.AddrPort) string {
	t.Helper()
	return exchange(addr, func(c net.Conn) (io.Reader, bool) { return c, true })
}

// exchange connects to addr, lets ask speak on the connection, and returns all it then
// reads from what ask returns (the connection, or a reader over it) until the peer closes;
// "" when the dial fails or ask says it was refused (false). It takes 2 s at the most.
func exchange(addr netip.AddrPort, ask func(c net.Conn) (io.Reader, bool)) string {
	c, err := net.DialTimeout("tcp", addr.String(), 2*time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	r, ok := ask(c)
	if !ok {
		return ""
	}
	b, _ := io.ReadAll(r)
	return string(b)
}

// wantFree fails t when addr cannot be listened on: what names the socket that should be
// closed ("the forward's address stayed taken").
func wantFree(t *testing.T, addr, what string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	ln.Close()
}

// takenAddr is a loopback address something listens on until the test ends.
func takenAddr(t *testing.T) string {
	t.Helper()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	return taken.Addr().String()
}

// TestRunInstallsOnceAndStops: the daemon compiles one policy per load, hands the capture
// that same decision, and leaves when its context ends.
func TestRunInstallsOnceAndStops(t *testing.T) {
	s := newScene(t)
	s.write(s.text("127.0.0.0/8", ""))
	pf := &capturetest.Platform{}
	ready, reloaded := make(chan struct{}), make(chan error, 1)
	reload := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigPath: s.path, Platform: pf, Log: slog.New(slog.DiscardHandler), Ready: ready,
			Reload: reload, Reloaded: reloaded, Grace: time.Second})
	}()
	waitReady(t, ready, done)
	if got := banner(t, s.fwd); got != "model\n" {
		t.Errorf("forward said %q", got)
	}
	reload <- struct{}{}
	if err := <-reloaded; err != nil {
		t.Fatalf("reload: %v", err)
	}
	if envs, installs := pf.Counts(); envs != 2 || installs != 2 {
		t.Errorf("after a start and a reload: %d compiles, %d installs; want 2 and 2", envs, installs)
	}
	if pf.Decisions()[1] == nil || len(pf.Decisions()[1].Rules()) != 1 {
		t.Errorf("the capture got decision %v", pf.Decisions()[1])
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after stop: %v", err)
	}
}

// TestRunExitsOnCaptureFailure: the daemon's side of a capture that fails while it runs
// (the Windows engine's read error): Run closes the capture and returns the failure, so the
// service exits with a failure code and is restarted; a clean stop closes it too. What
// Close drops is the platform's (windivert/platform: TestWindowsPlatformFailsClosed).
func TestRunExitsOnCaptureFailure(t *testing.T) {
	s := newScene(t)
	s.write(s.text("127.0.0.0/8", ""))
	for _, fail := range []bool{true, false} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			pf := &capturetest.Platform{}
			ready := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, Options{ConfigPath: s.path, Platform: pf, Ready: ready, Grace: time.Second})
			}()
			waitReady(t, ready, done)
			if fail {
				pf.Fail(errors.New("driver gone"))
			} else {
				cancel()
			}
			select {
			case err := <-done:
				if fail && (err == nil || !strings.Contains(err.Error(), "the capture failed") || !strings.Contains(err.Error(), "driver gone")) {
					t.Errorf("Run = %v, want the capture's failure", err)
				}
				if !fail && err != nil {
					t.Errorf("Run after a stop = %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return")
			}
			if n := pf.Closes(); n != 1 {
				t.Errorf("the capture was closed %d times, want once", n)
			}
		})
	}
}

func TestRunReportsAFailedInstall(t *testing.T) {
	s := newScene(t)
	s.write(s.text("127.0.0.0/8", ""))
	pf := &capturetest.Platform{}
	pf.SetInstallError(errors.New("nft refused"))
	err := Run(context.Background(), Options{ConfigPath: s.path, Platform: pf, Grace: time.Second})
	if err == nil || !strings.Contains(err.Error(), "install capture: nft refused") {
		t.Fatalf("Run = %v, want the install error", err)
	}
	// Everything the start opened is closed again.
	wantFree(t, s.fwd.String(), "the forward's address stayed taken")
}

// TestReloadSwapsForwardSettings: a forward whose listen address stays keeps its socket
// through a reload (nothing to reopen, so nothing can fail to reopen) and serves new
// connections with the new allow list.
func TestReloadSwapsForwardSettings(t *testing.T) {
	s := newScene(t)
	s.write(s.text("10.0.0.0/8", ""))
	d := s.daemon(&capturetest.Platform{}, nil)
	s.start(d)
	if got := banner(t, s.fwd); got != "" {
		t.Fatalf("a source outside allow got %q", got)
	}
	before := d.forwards[s.fwd.String()]
	s.write(s.text("127.0.0.0/8", ""))
	if err := d.reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := d.forwards[s.fwd.String()]
	if after == nil || after.ln != before.ln {
		t.Fatalf("the forward's socket was replaced (%p → %p)", before, after)
	}
	if got := banner(t, s.fwd); got != "model\n" {
		t.Errorf("after the reload, an allowed source got %q", got)
	}
}

// TestReloadFailureChangesNothing: a reload that fails after it opened a new forward's
// socket closes that socket and keeps the running config, whether the capture refuses the
// new config or the router does (a config conf would refuse, fed past it).
func TestReloadFailureChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  func(pf *capturetest.Platform)
		load  func(cfg *conf.Config)
		wants string
	}{
		{"capture refuses", func(pf *capturetest.Platform) { pf.SetInstallError(errors.New("nft refused")) }, nil, "install capture"},
		{"router refuses", nil, func(cfg *conf.Config) {
			cfg.Rules = append(cfg.Rules, rules.Rule{Name: "ghost", Action: rules.Proxy, Proxy: "nowhere"})
		}, "unknown proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScene(t)
			s.write(s.text("127.0.0.0/8", ""))
			pf := &capturetest.Platform{}
			var tamper func(*conf.Config)
			d := s.daemon(pf, func(path string) (*conf.Config, error) {
				cfg, err := conf.Load(path, conf.Options{})
				if err == nil && tamper != nil {
					tamper(cfg)
				}
				return cfg, err
			})
			s.start(d)
			old := d.cfg
			extra := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), freePort(t))
			s.write(s.text("127.0.0.0/8", fmt.Sprintf("[[forward]]\nlisten = %q\nconnect = %q\nallow = [\"127.0.0.0/8\"]\n", extra, s.target)))
			if tc.fail != nil {
				tc.fail(pf)
			}
			tamper = tc.load
			err := d.reload(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("reload = %v, want an error naming %q", err, tc.wants)
			}
			if d.cfg != old || len(d.forwards) != 1 {
				t.Errorf("the running config changed: %d forwards", len(d.forwards))
			}
			wantFree(t, extra.String(), "the new forward's socket leaked")
			if got := banner(t, s.fwd); got != "model\n" {
				t.Errorf("the running forward says %q", got)
			}
		})
	}
}

// relayPlatform is a fake platform whose capture hands UDP to the router itself
// (capture.UDPRelay, as the Windows engine does): it records the router it was given.
type relayPlatform struct {
	*capturetest.Platform
	got      *capture.UDPRouter
	installs *int // the installs done when it was given
}

func (p relayPlatform) UseRouter(r capture.UDPRouter) {
	*p.got = r
	_, *p.installs = p.Counts()
}

// TestStartHandsTheRouterToAUDPRelay: a platform that relays UDP through the router gets
// the running router before its first Install, with the daemon's flow log.
func TestStartHandsTheRouterToAUDPRelay(t *testing.T) {
	s := newScene(t)
	s.write(s.text("127.0.0.0/8", ""))
	var got capture.UDPRouter
	installs := -1
	pf := relayPlatform{&capturetest.Platform{}, &got, &installs}
	d := s.daemon(pf, nil)
	s.start(d)
	if got == nil || installs != 0 {
		t.Fatalf("the platform was given the router %v after %d installs, want it before the first", got, installs)
	}
	if got.Audit() != d.r.Audit() || got.Audit() == nil {
		t.Errorf("the platform's router records to %p, want the daemon's flow log %p", got.Audit(), d.r.Audit())
	}
}

// waitReady waits (up to 10 s) until the daemon Run started says it is ready; Run's
// return before that (done) fails t with its error.
func waitReady(t *testing.T, ready <-chan struct{}, done <-chan error) {
	t.Helper()
	wait.Started(t, "the daemon's Run", 10*time.Second, ready, done)
}
