//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/syncbuf"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/control"
)

// askConfig is the scene's config with the console on and an ask rule before the guest's
// catch-all: the echo service's name at port 80 (approved in the tests) and 8089 (denied).
// The service's address is not asked about (the guest's live flow).
func askConfig(timeout string) string {
	cfg := config(lab.GoSocksAddr, fmt.Sprintf(`
[policy]
ask_timeout = %q

[console]
listen = "127.0.0.1:9478"
`, timeout))
	return strings.Replace(cfg, "[[rule]]\nname = \"vm\"", `[[rule]]
name = "ask-echo"
hosts = ["`+lab.EchoName+`"]
ports = [80, 8089]
action = "ask"

[[rule]]
name = "vm"`, 1)
}

// consoleURL asks the running router for the console's URL (router console's answer).
func (s *scene) consoleURL() string {
	s.t.Helper()
	out, err := exec.CommandContext(s.ctx, routerBin, "console", "--socket", s.controlPath()).CombinedOutput()
	if err != nil {
		s.t.Fatalf("router console: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// waitAsk waits for the prompt of port on the control channel.
func (s *scene) waitAsk(port uint16) control.Prompt {
	s.t.Helper()
	var found *control.Prompt
	_ = wait.Poll(10*time.Second, func() bool {
		c, err := control.Dial(s.ctx, s.controlPath())
		if err != nil {
			s.t.Fatal(err)
		}
		resp, err := c.Do(control.Request{Op: "asks"})
		c.Close()
		if err != nil {
			s.t.Fatal(err)
		}
		for _, p := range resp.Asks {
			if p.Port == port {
				found = &p
				return true
			}
		}
		return false
	})
	if found != nil {
		return *found
	}
	s.t.Fatalf("no prompt for port %d", port)
	return control.Prompt{}
}

// browser runs headless Chromium in the router's namespace (where the console listens on
// loopback), through a wrapper that enters the namespace (ip netns exec keeps the DevTools
// pipe, chromedp's default), and returns a chromedp context driving it.
func (s *scene) browser() context.Context {
	s.t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		s.t.Fatalf("chromium is needed (apt-get install chromium): %v", err)
	}
	wrapper := filepath.Join(s.t.TempDir(), "chromium-in-netns")
	script := fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s %s \"$@\"\n", s.lab.Host().Name(), bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		s.t.Fatal(err)
	}
	out := &syncbuf.Buffer{Max: 64 << 10} // chromium's output, for the log
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(wrapper), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1100, 900), chromedp.UserDataDir(s.t.TempDir()), chromedp.CombinedOutput(out))
	actx, cancel := chromedp.NewExecAllocator(s.ctx, opts...)
	s.t.Cleanup(cancel)
	bctx, cancel2 := chromedp.NewContext(actx)
	s.t.Cleanup(func() {
		cancel2()
		if s.t.Failed() {
			s.t.Logf("chromium:\n%s", out.String())
		}
	})
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		s.t.Fatalf("start chromium: %v\n%s", err, out.String())
	}
	return bctx
}

// TestConsoleBrowser: a real browser loads the console by the URL `router console`
// prints, sees a guest's flow with its name and bytes, finds every cell of its tables under
// its column's header, approves a held flow (the guest's request then completes through the
// proxy) and denies another (it fails at once), and saves a screenshot.
func TestConsoleBrowser(t *testing.T) {
	s := newScene(t, askConfig("30s"))
	guest := s.lab.Guest()
	bctx := s.browser()
	url := s.consoleURL()
	if !strings.HasPrefix(url, "http://127.0.0.1:9478/?token=") {
		t.Fatalf("console URL %q", url)
	}
	// A live flow for the console to show: held open after a few bytes.
	held, err := guest.Dial(s.ctx, "tcp", lab.ServiceAddr+":80")
	if err == nil {
		defer held.Close()
		io.WriteString(held, "GET / HTTP/1.1\r\nHost: held\r\n")
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`#flows tbody tr`))); err != nil {
		t.Fatalf("load the console: %v", err)
	}
	flows, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#flows tbody`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flows, lab.ServiceAddr) || !strings.Contains(flows, "vm") || !strings.Contains(flows, " B") {
		t.Errorf("the console's flows do not show the guest's: %q", flows)
	}
	if err := chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`#rules tbody tr`)), chromedp.WaitVisible(chromedp.CSS(`#upstreams tbody tr`))); err != nil {
		t.Fatal(err)
	}
	wantAligned(t, bctx)

	// Two held flows: port 80 is approved from the page, port 8089 denied.
	type result struct {
		out  string
		code int
		took time.Duration
	}
	approved, denied := make(chan result, 1), make(chan result, 1)
	go func() {
		start := time.Now()
		out, code := s.curl(guest, "http://"+lab.EchoName+"/", "--max-time", "25")
		approved <- result{out, code, time.Since(start)}
	}()
	s.waitAsk(80)
	go func() {
		out, code := s.curl(guest, "http://"+lab.EchoName+":8089/", "--max-time", "25")
		denied <- result{out, code, 0}
	}()
	s.waitAsk(8089)
	shot := filepath.Join(t.ArtifactDir(), "console.png")
	if err := chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`.ask[data-port="8089"]`)),
		chromedp.WaitVisible(chromedp.CSS(`.ask[data-port="80"]`))); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if dst := os.Getenv("ROUTER_E2E_SCREENSHOT"); dst != "" {
		os.WriteFile(dst, png, 0o644)
	}
	t.Logf("screenshot: %s", shot)

	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`.ask[data-port="80"] button[data-answer="once"]`))); err != nil {
		t.Fatal(err)
	}
	r := <-approved
	if r.code != 0 || strings.TrimSpace(r.out) != lab.ExitAddr {
		t.Errorf("approved request: exit %d, %q (want the proxy's exit address)", r.code, r.out)
	}
	t.Logf("the approved request took %v (held until the click)", r.took)
	// The answered prompt leaves the page at the next poll, and the one below moves up into
	// its place: a click aimed before that lands where the button no longer is. Wait for it.
	if err := chromedp.Do(bctx, chromedp.WaitNotPresent(chromedp.CSS(`.ask[data-port="80"]`))); err != nil {
		t.Fatal(err)
	}
	clicked := time.Now()
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`.ask[data-port="8089"] button[data-answer="deny"]`))); err != nil {
		t.Fatal(err)
	}
	r = <-denied
	if gotThrough(r.out, r.code) || time.Since(clicked) > 3*time.Second {
		t.Errorf("denied request: exit %d after %v, want a refusal at once", r.code, time.Since(clicked))
	}
	if n, recent := refusalCount(s.status(), "ask-denied"); n != 1 || len(recent) == 0 || recent[0].Host != lab.EchoName {
		t.Errorf("ask-denied refusals: %d %+v, want the denied flow", n, recent)
	}
	s.wantNoLeak("console")
}

// alignedJS lists, for every visible table of the page, each cell whose text does not sit
// under its column's header: a row with another number of cells than headers, or a cell
// whose text lies outside its header cell's box or shares no x-range with the header's
// text (a right-aligned number under a left-aligned header ends under the next one's).
const alignedJS = `(() => {
  const bad = [];
  const span = n => { const r = document.createRange(); r.selectNodeContents(n); return r.getBoundingClientRect(); };
  for (const t of document.querySelectorAll("table")) {
    if (!t.offsetParent) continue;
    const heads = [...t.tHead.rows[0].cells];
    for (const tr of t.tBodies[0].rows) {
      if (tr.cells.length !== heads.length) { bad.push(t.id + ": " + tr.cells.length + " cells under " + heads.length + " headers"); continue; }
      [...tr.cells].forEach((td, i) => {
        if (!td.textContent.trim() || !td.offsetParent) return;
        const h = heads[i], box = h.getBoundingClientRect(), ht = span(h), ct = span(td);
        if (ct.left < box.left - 0.5 || ct.right > box.right + 0.5 || ct.right < ht.left || ct.left > ht.right)
          bad.push(t.id + ": " + JSON.stringify(td.textContent) + " at x " + Math.round(ct.left) + "-" + Math.round(ct.right) +
            " under " + JSON.stringify(h.textContent) + " at x " + Math.round(ht.left) + "-" + Math.round(ht.right) +
            " (its cell " + Math.round(box.left) + "-" + Math.round(box.right) + ")");
      });
    }
  }
  return bad;
})()`

// wantAligned fails t when a cell of the console's tables does not sit under its header.
func wantAligned(t *testing.T, bctx context.Context) {
	t.Helper()
	bad, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](alignedJS))
	if err != nil {
		t.Fatalf("measure the tables: %v", err)
	}
	for _, b := range bad {
		t.Errorf("a cell off its column: %s", b)
	}
}

// TestAskTimeoutAndAlways: an unanswered flow is refused at its timeout; "always" writes
// the router's own rules file, which a restart reads (the flow is no longer asked about)
// and explain names.
func TestAskTimeoutAndAlways(t *testing.T) {
	s := newScene(t, askConfig("2s"))
	guest := s.lab.Guest()
	start := time.Now()
	echo := "http://" + lab.EchoName + "/"
	if out, code := s.curl(guest, echo, "--max-time", "10"); gotThrough(out, code) {
		t.Error("an unanswered flow went through")
	}
	if took := time.Since(start); took < 2*time.Second || took > 6*time.Second {
		t.Errorf("the unanswered flow ended after %v, want about 2s", took)
	}
	if n, _ := refusalCount(s.status(), "ask-denied"); n != 1 {
		t.Errorf("%d ask-denied refusals after the timeout, want 1", n)
	}

	res := make(chan int, 1)
	go func() { _, code := s.curl(guest, echo, "--max-time", "10"); res <- code }()
	p := s.waitAsk(80)
	out, err := exec.CommandContext(s.ctx, routerBin, "ask", "--socket", s.controlPath(), "--id", fmt.Sprint(p.ID), "--answer", "always").CombinedOutput()
	if err != nil {
		t.Fatalf("router ask always: %v: %s", err, out)
	}
	if code := <-res; code != 0 {
		t.Errorf("the approved flow: curl exit %d", code)
	}
	approved, err := os.ReadFile(s.stateFile("approved.toml")) // the router's own file, in its state directory
	if err != nil || !strings.Contains(string(approved), `name = "approved `+lab.EchoName+`:80"`) || !strings.Contains(string(approved), "by router ask") {
		t.Fatalf("approved.toml: %v\n%s", err, approved)
	}
	if out, code := s.routerCmd("explain", "--config", s.cfg, "--src", "10.0.2.15", "--dst", lab.EchoName+":80"); code != 0 || !strings.Contains(out, "approved.toml") || !strings.Contains(out, "verdict: proxy") {
		t.Errorf("explain after always: exit %d\n%s", code, out)
	}
	if out, code := s.routerCmd("lint", "--config", s.cfg); code != 0 {
		t.Errorf("lint after always: exit %d\n%s", code, out)
	}
	s.stopRouter(syscall.SIGTERM)
	s.startRouter()
	start = time.Now()
	if o, code := s.curl(guest, echo, "--max-time", "5"); code != 0 || strings.TrimSpace(o) != lab.ExitAddr || time.Since(start) > 2*time.Second {
		t.Errorf("after a restart: exit %d, %q in %v, want the approved rule to carry it at once", code, o, time.Since(start))
	}
}

// TestConsoleRefuses: the console refuses a foreign Host (DNS rebinding), a request
// without the token, an answer with a forged CSRF token, and the guest.
func TestConsoleRefuses(t *testing.T) {
	s := newScene(t, askConfig("30s"))
	host := s.lab.Host()
	url := s.consoleURL()
	token := url[strings.Index(url, "token=")+len("token="):]
	code := func(ns *lab.Netns, args ...string) string {
		out, _ := run(s.ctx, ns, "curl", append([]string{"-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "3"}, args...)...)
		return out
	}
	cookie := "router_console=" + token
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"the token URL", []string{url}, "303"},
		{"with the cookie", []string{"-b", cookie, "http://127.0.0.1:9478/api/state"}, "200"},
		{"a foreign Host", []string{"-b", cookie, "-H", "Host: rebound.example:9478", "http://127.0.0.1:9478/api/state"}, "403"},
		{"no token", []string{"http://127.0.0.1:9478/api/state"}, "401"},
		{"a wrong token", []string{"http://127.0.0.1:9478/?token=guess"}, "403"},
		{"a forged CSRF token", []string{"-b", cookie, "-H", "X-CSRF-Token: forged", "-d", `{"id":1,"answer":"always"}`, "http://127.0.0.1:9478/api/answer"}, "403"},
	} {
		if got := code(host, c.args...); got != c.want {
			t.Errorf("%s: HTTP %s, want %s", c.name, got, c.want)
		}
	}
	// The guest reaches no port of the host but the forwards' (the kernel's walls), and
	// the console listens on the host's loopback only.
	if out, exit := run(s.ctx, s.lab.Guest(), "curl", "-s", "--max-time", "3", "http://"+lab.GatewayAddr+":9478/?token="+token); exit == 0 {
		t.Errorf("the guest reached the console: %q", out)
	}
	s.wantNoLeak("console refusals")
}

// TestAskFloodDoesNotStopOthers: 10,000 connections from one guest address to as many
// unknown destinations under unknown = "ask" hold at most that source's share (the rest
// refused at once), and another guest address's allowed flows go through meanwhile.
func TestAskFloodDoesNotStopOthers(t *testing.T) {
	const flood = 10000
	cfg := config(lab.GoSocksAddr, "\n[policy]\nunknown = \"ask\"\n")
	cfg = strings.Replace(cfg, "[[rule]]\nname = \"vm\"\nsources = [\"10.0.2.0/24\"]", "[[rule]]\nname = \"vm\"\nsources = [\"10.0.2.16/32\"]", 1)
	s := newScene(t, cfg)
	guest := s.lab.Guest()
	if _, code := run(s.ctx, guest, "ip", "addr", "add", "10.0.2.16/24", "dev", lab.GuestDev); code != 0 {
		t.Fatal("second guest address")
	}
	var mu sync.Mutex
	var conns []io.Closer
	failed := 0
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				dst := fmt.Sprintf("203.0.%d.%d:%d", 114+i/50000, 1+i%250, 1000+i%50000)
				c, err := guest.DialFrom(s.ctx, "tcp", lab.GuestAddr, dst)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					conns = append(conns, c)
				}
				mu.Unlock()
			}
		})
	}
	// The other source's flows run while the flood is under way and after it.
	var worst time.Duration
	others := 0
	other := func() {
		t0 := time.Now()
		out, code := s.curl(guest, lab.EchoURL, "--interface", "10.0.2.16", "--max-time", "5")
		if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
			t.Errorf("the other source's request: exit %d, %q", code, out)
		}
		worst = max(worst, time.Since(t0))
		others++
	}
	for i := range flood {
		next <- i
		if i%2000 == 0 {
			other()
		}
	}
	close(next)
	wg.Wait()
	dialled := time.Since(start)
	for range 5 {
		other()
	}
	st := s.status()
	held := 0
	for _, p := range st.Asks {
		held += p.Held
	}
	denied, _ := refusalCount(st, "ask-denied")
	limit, _ := refusalCount(st, "limit")
	t.Logf("%d connections from %s in %v (%d reset before the dial returned): %d held on %d prompts, %d refused ask-denied, %d limit; %d requests of 10.0.2.16 meanwhile and after, the slowest %v",
		flood, lab.GuestAddr, dialled, failed, held, len(st.Asks), denied, limit, others, worst)
	if held > 64 {
		t.Errorf("%d flows held for one source, want at most 64", held)
	}
	if worst > 2*time.Second {
		t.Errorf("the other source's slowest request took %v", worst)
	}
	s.wantNoLeak("ask flood")
}

// cpuTicks is the CPU time (user and system, in clock ticks) process pid has used.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var u, s int64
	fmt.Sscan(f[11], &u) // utime, field 14
	fmt.Sscan(f[12], &s) // stime, field 15
	return u + s
}

// TestConsoleCost: with 2,000 live flows, the console open in a browser (polling the
// state a second after each poll ended, as it does) costs the router at most 2 % of a core
// more than no console.
func TestConsoleCost(t *testing.T) {
	const live = 2000
	s := newScene(t, askConfig("30s"))
	guest := s.lab.Guest()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []io.Closer
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	// Each of 32 openers opens its next flow once the last one is relayed (its answer came
	// back): a flow being set up holds one of its source's set-up slots, and flows opened
	// faster than the router sets them up would wait for one, and be refused after the
	// connect timeout, at a pace set by the machine's load. The server keeps each
	// connection open after its answer (keep-alive), so the flow stays live.
	next := make(chan struct{})
	errs := make(chan error, live)
	for range 32 {
		wg.Go(func() {
			for range next {
				c, err := guest.Dial(s.ctx, "tcp", lab.ServiceAddr+":80")
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+lab.ServiceAddr+"\r\n\r\n"); err != nil {
					errs <- err
					continue
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					errs <- fmt.Errorf("flow %v: %w", c.LocalAddr(), err)
					continue
				}
				resp.Body.Close() // (a small body, read whole: the connection stays usable)
				c.SetDeadline(time.Time{})
			}
		})
	}
	for range live {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	close(errs)
	if n := len(errs); n > 0 {
		t.Fatalf("%d of %d flows failed to open, the first: %v", n, live, <-errs)
	}
	if !wait.Poll(20*time.Second, func() bool { return len(s.status().Flows) >= live*9/10 }) {
		t.Fatalf("%d live flows, want about %d", len(s.status().Flows), live)
	}
	pid := s.router.PID()
	const window = 10 * time.Second
	measure := func() float64 {
		t0, c0 := time.Now(), cpuTicks(t, pid)
		time.Sleep(window)                                                         // not ordering: the window the router's CPU is measured over
		return float64(cpuTicks(t, pid)-c0) / 100 / time.Since(t0).Seconds() * 100 // ticks are 1/100 s
	}
	idle := measure()
	bctx := s.browser()
	if err := chromedp.Do(bctx, chromedp.Navigate(s.consoleURL()), chromedp.WaitVisible(chromedp.CSS(`#flows tbody tr`))); err != nil {
		t.Fatal(err)
	}
	open := measure()
	rows, _ := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#flows tbody tr").length`))
	t.Logf("%d live flows (%d rows on the page): the router used %.2f %% of a core without the console, %.2f %% with it open (+%.2f)",
		len(s.status().Flows), rows, idle, open, open-idle)
	if open-idle > 2 {
		t.Errorf("the console costs %.2f %% of a core, want at most 2", open-idle)
	}
}
