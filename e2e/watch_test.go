//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/roottest"
	"github.com/agentcage/router/internal/wait"
)

// tmux is a tmux server of the test's own (its socket in the test's directory), killed at
// cleanup, so the test never touches anyone's sessions.
type tmux struct {
	t    *testing.T
	sock string
}

func newTmux(t *testing.T) *tmux {
	t.Helper()
	roottest.Require(t, "tmux")
	x := &tmux{t: t, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	t.Cleanup(func() {
		// Ends this server (and the programs in its panes) only.
		if out, err := x.cmd("kill-server"); err != nil && !strings.Contains(out, "no server running") {
			t.Logf("tmux kill-server: %v: %s", err, out)
		}
	})
	return x
}

// cmd runs one tmux command against the test's server.
func (x *tmux) cmd(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "tmux", append([]string{"-S", x.sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
	return string(out), err
}

func (x *tmux) must(args ...string) string {
	x.t.Helper()
	out, err := x.cmd(args...)
	if err != nil {
		x.t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

// pane is what the session's screen shows, as text.
func (x *tmux) pane() string {
	x.t.Helper()
	return x.must("capture-pane", "-p", "-t", "watch")
}

// waitPane waits (up to d) until ok holds for the screen and returns that screen.
func (x *tmux) waitPane(what string, d time.Duration, ok func(string) bool) string {
	x.t.Helper()
	var p string
	if !wait.Poll(d, func() bool { p = x.pane(); return ok(p) }) {
		x.t.Fatalf("the watch screen did not show %s within %v:\n%s", what, d, p)
	}
	return p
}

// paneFlows are the rows of the live flows table on a screen.
func paneFlows(screen string) []string {
	lines := strings.Split(screen, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "LIVE FLOWS") {
			continue
		}
		var rows []string
		for _, r := range lines[min(i+2, len(lines)):] {
			if strings.TrimSpace(r) == "" || strings.HasPrefix(r, "no live flow") {
				break
			}
			rows = append(rows, r)
		}
		return rows
	}
	return nil
}

// hasFlow tells whether a row of the flows table holds every one of the words.
func hasFlow(screen string, words ...string) bool {
	for _, row := range paneFlows(screen) {
		all := true
		for _, w := range words {
			all = all && strings.Contains(row, w)
		}
		if all {
			return true
		}
	}
	return false
}

// guestTraffic keeps a keep-alive HTTP connection from the guest busy with a request every
// gap until the test ends (at most 3 minutes): a live flow with bytes and a rate.
func (s *scene) guestTraffic(url string, gap time.Duration) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return s.lab.Guest().Dial(ctx, network, addr)
		},
		MaxConnsPerHost: 1, IdleConnTimeout: 0, DisableCompression: true,
	}
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Add(1)
	first := make(chan error, 1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil && i < 10000; i++ {
			resp, err := cl.Get(url)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if i == 0 {
				first <- err
			}
			select {
			case <-ctx.Done():
			case <-time.After(gap):
			}
		}
	}()
	s.t.Cleanup(func() {
		cancel()
		wg.Wait()
		tr.CloseIdleConnections()
	})
	if err := <-first; err != nil {
		s.t.Fatalf("guest GET %s: %v", url, err)
	}
}

// watchConfig is the scene's config with a block rule for one name, so that a refusal by
// rule shows too.
func watchConfig(t *testing.T) string {
	cfg := config(lab.GoSocksAddr, "")
	const vm = "[[rule]]\nname = \"vm\""
	out := strings.Replace(cfg, vm, "[[rule]]\nname = \"telemetry\"\nhosts = [\"telemetry.lab.test\"]\naction = \"block\"\n\n"+vm, 1)
	if out == cfg {
		t.Fatal("no vm rule in the scene's config")
	}
	return out
}

// TestWatch: `router watch` in a terminal (tmux) shows the guest's live flows with their
// destination and rule and the refusals, fits a resized window, filters the flows by text,
// pauses, and quits on q with exit status 0.
func TestWatch(t *testing.T) {
	x := newTmux(t)
	s := newScene(t, watchConfig(t))

	// The guest looks a name up (the router answers a fake IP) and keeps fetching from it:
	// a proxied flow whose destination has a name. It also keeps the model busy through the
	// forward and is refused a blocked name. On the host, a hypervisor process (curl under
	// VBoxHeadless's name) fetches over one connection, four times a second.
	out, code := run(s.ctx, s.lab.Guest(), "dig", "+short", "+time=2", "+tries=1", "@"+lab.ServiceAddr, lab.EchoName)
	fake := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(fake, "198.18.") {
		t.Fatalf("guest dig %s: exit %d, %q; want a fake IP", lab.EchoName, code, out)
	}
	s.guestTraffic("http://"+fake+"/", 200*time.Millisecond)                  // rule "vm", proxied
	s.guestTraffic("http://"+lab.GatewayAddr+":47831/v1/models", time.Second) // the model forward
	if out, code := s.curl(s.lab.Guest(), "http://telemetry.lab.test/", "--max-time", "3"); code == 0 {
		t.Fatalf("the guest reached a blocked name: %q", out)
	}
	hv := s.hypervisorCopy("curl", "VBoxHeadless")
	urls := make([]string, 120) // 30 s at most
	for i := range urls {
		urls[i] = "http://" + lab.EchoName + "/"
	}
	hctx, stop := context.WithCancel(s.ctx)
	hcmd := s.lab.Host().Command(hctx, hv, append([]string{"-sS", "-o", "/dev/null", "--rate", "4/s"}, urls...)...)
	if err := hcmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(); hcmd.Wait() }) // ends it by its PID (exec.CommandContext)

	// In the host namespace, like an administrator on the host.
	// Its exit status goes to a file: tmux 3.3 sometimes marks the pane dead without
	// its status (the pane's terminal closed before the process was reaped).
	statusFile := filepath.Join(t.TempDir(), "status")
	cmdline := fmt.Sprintf("ip netns exec %s %s watch --config %s --interval 500ms; echo $? >%s",
		s.lab.Host().Name(), routerBin, s.cfg, statusFile)
	x.must("new-session", "-d", "-s", "watch", "-x", "160", "-y", "45", cmdline)
	x.must("set-option", "-t", "watch", "remain-on-exit", "on")

	echo := fake + ":80 (" + lab.EchoName + " by dns)" // the name and where it came from
	model := "forward model"
	screen := x.waitPane("both guest flows and the refusal", 15*time.Second, func(p string) bool {
		return hasFlow(p, echo, "vm", "proxy via exit") && hasFlow(p, lab.GuestAddr, model, "direct") &&
			hasFlow(p, lab.HostUplinkAddr, "VBoxHeadless", lab.EchoName, "hypervisor", "proxy via exit") &&
			strings.Contains(p, "(telemetry.lab.test), by telemetry")
	})
	t.Logf("router watch, 160x45:\n%s", screen)
	for _, want := range []string{"router watch  running ", "exit      up", "#2 hypervisor", "#3 telemetry", "#4 vm", "s sort: rate"} {
		if !strings.Contains(screen, want) {
			t.Errorf("the screen has no %q", want)
		}
	}
	// The proxied flow moves bytes every 200 ms: it has a rate, and the highest.
	x.waitPane("the echo flow first, with a rate", 10*time.Second, func(p string) bool {
		rows := paneFlows(p)
		return len(rows) > 0 && strings.Contains(rows[0], echo) && strings.Contains(rows[0], "B/s")
	})

	// Narrower, shorter windows: the frame follows them.
	for _, size := range [][2]int{{120, 32}, {100, 30}} {
		w, h := size[0], size[1]
		x.must("resize-window", "-t", "watch", "-x", fmt.Sprint(w), "-y", fmt.Sprint(h))
		screen = x.waitPane(fmt.Sprintf("a %dx%d frame", w, h), 5*time.Second, func(p string) bool {
			return hasFlow(p, lab.EchoName) && strings.Count(p, "\n") <= h && strings.Contains(p, "q quit")
		})
		t.Logf("router watch, %dx%d:\n%s", w, h, screen)
		for _, l := range strings.Split(screen, "\n") {
			if n := len([]rune(l)); n > w {
				t.Errorf("a line of %d columns in a %d-column window: %q", n, w, l)
			}
		}
	}

	// Filter: only the model's flow (by its rule), then all again, then only the echo's (by its
	// name), then none. The rule column may be cut at 100 columns: flows are told by address.
	x.must("send-keys", "-t", "watch", "/", "forward", "Enter")
	x.waitPane("only the model flow", 5*time.Second, func(p string) bool {
		return strings.Contains(p, `match "forward"`) && hasFlow(p, lab.ModelAddr) && !hasFlow(p, lab.EchoName)
	})
	x.must("send-keys", "-t", "watch", "Escape")
	x.waitPane("both flows after Esc", 5*time.Second, func(p string) bool {
		return hasFlow(p, lab.ModelAddr) && hasFlow(p, lab.EchoName) && !strings.Contains(p, "match")
	})
	x.must("send-keys", "-t", "watch", "/", "echo.lab", "Enter")
	x.waitPane("only the echo flow", 5*time.Second, func(p string) bool {
		return strings.Contains(p, `match "echo.lab"`) && hasFlow(p, lab.EchoName) && !hasFlow(p, lab.ModelAddr)
	})
	x.must("send-keys", "-t", "watch", "/", "nothing-like-this", "Enter")
	x.waitPane("no flow", 5*time.Second, func(p string) bool {
		return strings.Contains(p, "no live flow matches") && !hasFlow(p, lab.EchoName) && !hasFlow(p, lab.ModelAddr)
	})
	x.must("send-keys", "-t", "watch", "Escape")

	// Pause freezes the screen and says so.
	x.must("send-keys", "-t", "watch", "p")
	x.waitPane("PAUSED", 5*time.Second, func(p string) bool { return strings.Contains(p, "PAUSED") })
	x.must("send-keys", "-t", "watch", "p")
	x.waitPane("the view resumed", 5*time.Second, func(p string) bool { return !strings.Contains(p, "PAUSED") })

	// q ends it, with status 0.
	x.must("send-keys", "-t", "watch", "q")
	var status string
	var err error
	if !wait.Poll(5*time.Second, func() bool {
		var b []byte
		b, err = os.ReadFile(statusFile)
		status = strings.TrimSpace(string(b))
		return err == nil && status != ""
	}) || status != "0" {
		t.Fatalf("router watch did not exit 0 on q within 5 s (status %q, %v):\n%s", status, err, x.pane())
	}

	// The same frame as plain text, and the status as JSON, for scripts (logged for the docs).
	out, code = s.routerCmd("watch", "--once", "--config", s.cfg)
	if code != 0 || !strings.Contains(out, echo) || strings.Contains(out, "\x1b[") {
		t.Errorf("watch --once: exit %d\n%s", code, out)
	}
	t.Logf("router watch --once:\n%s", out)
	out, code = s.routerCmd("status", "--json", "--config", s.cfg)
	if code != 0 {
		t.Errorf("status --json: exit %d\n%s", code, out)
	}
	t.Logf("router status --json:\n%s", out)
}
