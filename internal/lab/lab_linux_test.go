//go:build linux

package lab

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/roottest"
	"github.com/agentcage/router/internal/wait"
)

// These tests build real labs: they need root, ip, nft, danted, curl and dig. They run only
// with ROUTER_E2E=1 (package internal/roottest; scripts/test sets it), and then fail (never
// skip) when something is missing.

// labTools are the programs a lab and these tests run.
var labTools = []string{"ip", "nft", "danted", "curl", "dig"}

const testModelGap = 100 * time.Millisecond

// newTestLab builds a lab that t's cleanup closes, logging the lab's diagnostics first when t
// failed.
func newTestLab(t *testing.T, opts Options) *Lab {
	t.Helper()
	roottest.Require(t, labTools...)
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(l.Diagnostics(context.Background()))
		}
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// dumpOnFailure logs the lab's diagnostics when the (sub)test t fails.
func dumpOnFailure(t *testing.T, l *Lab) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(l.Diagnostics(context.Background()))
		}
	})
}

// run runs a command in ns and fails t when it fails; it returns the trimmed output.
func run(t *testing.T, ns *Netns, name string, args ...string) string {
	t.Helper()
	out, err := ns.Run(context.Background(), name, args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return strings.TrimSpace(string(out))
}

func curl(t *testing.T, ns *Netns, args ...string) string {
	t.Helper()
	return run(t, ns, "curl", append([]string{"-sS", "--connect-timeout", "3", "--max-time", "5"}, args...)...)
}

// curlFails runs curl in ns, expects it to fail, and returns its exit code.
func curlFails(t *testing.T, ns *Netns, args ...string) int {
	t.Helper()
	out, err := ns.Run(context.Background(), "curl", append([]string{"-sS", "--connect-timeout", "1", "--max-time", "2"}, args...)...)
	if err == nil {
		t.Fatalf("curl %v succeeded with %q, want a failure", args, out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("curl %v: %v, want an exit status", args, err)
	}
	return exit.ExitCode()
}

func leaks(t *testing.T, l *Lab) Leaks {
	t.Helper()
	lk, err := l.Leaks(context.Background())
	if err != nil {
		t.Fatalf("Leaks: %v", err)
	}
	return lk
}

func resetLeaks(t *testing.T, l *Lab) {
	t.Helper()
	if err := l.ResetLeaks(context.Background()); err != nil {
		t.Fatalf("ResetLeaks: %v", err)
	}
	if got := leaks(t, l); got.Packets != 0 {
		t.Fatalf("leaks after reset = %v, want 0", got)
	}
}

// inetAddr reports whether ip belongs to the inet namespace.
func inetAddr(ip string) bool {
	return ip == ServiceAddr || ip == ExitAddr || ip == InetUplinkAddr
}

func TestLab(t *testing.T) {
	l := newTestLab(t, Options{ModelGap: testModelGap, ModelEvents: 5})
	ctx := context.Background()

	t.Run("sysctls", func(t *testing.T) {
		dumpOnFailure(t, l)
		for _, c := range []struct {
			ns        *Netns
			key, want string
		}{
			{l.Inet(), "net.ipv4.tcp_max_tw_buckets", "0"},
			{l.Host(), "net.ipv4.ip_forward", "1"},
			{l.Guest(), "net.ipv4.tcp_tw_reuse", "1"},
			{l.Guest(), "net.ipv4.ip_local_port_range", "1024\t65000"},
		} {
			if got := run(t, c.ns, "sysctl", "-n", c.key); got != c.want {
				t.Errorf("%s %s = %q, want %q", c.ns.Name(), c.key, got, c.want)
			}
		}
	})

	t.Run("guest through hypervisor NAT shows the host address and leaks", func(t *testing.T) {
		dumpOnFailure(t, l)
		resetLeaks(t, l)
		if got, want := curl(t, l.Guest(), EchoURL), HostUplinkAddr; got != want {
			t.Errorf("echo from guest = %q, want %q", got, want)
		}
		if got, want := curl(t, l.Guest(), EchoURL+"json"), `{"ip":"`+HostUplinkAddr+`"}`; got != want {
			t.Errorf("json echo from guest = %q, want %q", got, want)
		}
		lk := leaks(t, l)
		if lk.Packets == 0 || lk.TCP == 0 {
			t.Errorf("leaks after a direct guest request = %v, want TCP packets counted", lk)
		}
		hl := l.HTTPLog()
		if len(hl) == 0 {
			t.Fatal("http log is empty")
		}
		last := hl[len(hl)-1]
		if got := last.Remote.Addr().String(); got != HostUplinkAddr || last.Path != "/json" || last.Host != ServiceAddr {
			t.Errorf("last http log entry = %v, want from %s, Host %s, path /json", last, HostUplinkAddr, ServiceAddr)
		}
	})

	t.Run("guest dig asks the lab DNS from the host address", func(t *testing.T) {
		dumpOnFailure(t, l)
		l.ResetLogs()
		if got, want := run(t, l.Guest(), "dig", "@"+ServiceAddr, EchoName, "+short", "+time=2", "+tries=1"), ServiceAddr; got != want {
			t.Errorf("dig %s = %q, want %q", EchoName, got, want)
		}
		if got, want := run(t, l.Guest(), "dig", "@"+ServiceAddr, WhoamiName, "+short", "+tcp", "+time=2", "+tries=1"), HostUplinkAddr; got != want {
			t.Errorf("dig +tcp %s = %q, want %q", WhoamiName, got, want)
		}
		var got []string
		for _, q := range l.DNSLog() {
			got = append(got, fmt.Sprintf("%s %s %s %s", q.Source.Addr(), q.Transport, q.Name, q.Type))
		}
		want := []string{
			HostUplinkAddr + " udp " + EchoName + ". A",
			HostUplinkAddr + " tcp " + WhoamiName + ". A",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("dns log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("resolv.conf of the namespaces points at the lab DNS", func(t *testing.T) {
		dumpOnFailure(t, l)
		for _, ns := range []*Netns{l.Guest(), l.Host(), l.Inet()} {
			if got, want := strings.Fields(run(t, ns, "getent", "ahostsv4", EchoName)), ServiceAddr; len(got) == 0 || got[0] != want {
				t.Errorf("getent in %s = %q, want %s first", ns.Name(), got, want)
			}
		}
	})

	for _, p := range []struct{ name, addr string }{{"go-socks5", GoSocksAddr}, {"dante", DanteAddr}} {
		t.Run("host through "+p.name+" exits from the exit address without leaking", func(t *testing.T) {
			dumpOnFailure(t, l)
			resetLeaks(t, l)
			l.ResetLogs()
			if got, want := curl(t, l.Host(), "--socks5-hostname", p.addr, EchoURL), ExitAddr; got != want {
				t.Errorf("echo through %s = %q, want %q", p.name, got, want)
			}
			if got, want := curl(t, l.Host(), "--socks5-hostname", p.addr, "http://"+EchoName+"/"), ExitAddr; got != want {
				t.Errorf("echo by name through %s = %q, want %q", p.name, got, want)
			}
			if lk := leaks(t, l); lk.Packets != 0 {
				t.Errorf("leaks after SOCKS requests = %v, want 0", lk)
			}
			var asked bool
			for _, q := range l.DNSLog() {
				if q.Name == EchoName+"." && q.Type == "A" {
					asked = true
					if !inetAddr(q.Source.Addr().String()) {
						t.Errorf("dns query %v comes from outside inet", q)
					}
				}
			}
			if !asked {
				t.Errorf("%s did not ask the lab DNS for %s", p.name, EchoName)
			}
			hl := l.HTTPLog()
			if len(hl) != 2 || hl[1].Host != EchoName || hl[1].Remote.Addr().String() != ExitAddr {
				t.Errorf("http log = %v, want 2 requests from %s, the second for Host %s", hl, ExitAddr, EchoName)
			}
		})
	}

	t.Run("UDP echo from the guest, counted as a leak", func(t *testing.T) {
		dumpOnFailure(t, l)
		resetLeaks(t, l)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := l.Guest().Dial(cctx, "udp", UDPEchoAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read udp echo: %v", err)
		}
		if got := string(buf[:n]); !strings.HasPrefix(got, HostUplinkAddr+":") {
			t.Errorf("udp echo = %q, want %s:port", got, HostUplinkAddr)
		}
		if lk := leaks(t, l); lk.UDP == 0 {
			t.Errorf("leaks = %v, want UDP counted", lk)
		}
	})

	t.Run("ICMP from the guest, counted as a leak", func(t *testing.T) {
		dumpOnFailure(t, l)
		resetLeaks(t, l)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := l.Guest().Dial(cctx, "ip4:icmp", ServiceAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write(icmpEcho(0x4c42, 1)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read icmp reply: %v", err)
		}
		// The raw socket hands over the IPv4 header too.
		if n < 28 || buf[20] != 0 {
			t.Errorf("icmp reply = % x, want an echo reply", buf[:n])
		}
		if lk := leaks(t, l); lk.ICMP == 0 {
			t.Errorf("leaks = %v, want ICMP counted", lk)
		}
	})

	t.Run("IPv6 from the host, counted as a leak", func(t *testing.T) {
		dumpOnFailure(t, l)
		resetLeaks(t, l)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := l.Host().Dial(cctx, "udp", "["+InetUplinkAddr6+"]:9")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("leak")); err != nil {
			t.Fatal(err)
		}
		var lk Leaks
		_ = wait.Poll(5*time.Second, func() bool { // the datagram waits for neighbour discovery
			lk = leaks(t, l)
			return lk.UDP > 0
		})
		if lk.IPv6 == 0 || lk.UDP == 0 {
			t.Errorf("leaks = %v, want an IPv6 UDP packet counted", lk)
		}
	})

	t.Run("model server on the host loopback only", func(t *testing.T) {
		dumpOnFailure(t, l)
		got := curl(t, l.Host(), "http://"+ModelAddr+"/v1/models")
		if want := `{"data":[{"id":"` + ModelID + `","object":"model","owned_by":"lab"}],"object":"list"}`; got != want {
			t.Errorf("models = %s, want %s", got, want)
		}
		if code := curlFails(t, l.Guest(), "http://"+GatewayAddr+":47831/v1/models"); code != 7 {
			t.Errorf("curl from the guest to %s:47831 exit code = %d, want 7 (connection refused)", GatewayAddr, code)
		}
	})

	t.Run("streamed completion events arrive as sent", func(t *testing.T) {
		dumpOnFailure(t, l)
		l.ResetLogs()
		client := &http.Client{
			Timeout: 10 * time.Second,
			Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return l.Host().Dial(ctx, network, addr)
			}},
		}
		defer client.CloseIdleConnections()
		body := `{"model":"` + ModelID + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		resp, err := client.Post("http://"+ModelAddr+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var arrived []time.Time
		var payloads []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				arrived = append(arrived, time.Now())
				payloads = append(payloads, p)
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("read stream: %v", err)
		}
		streams := l.ModelLog()
		if len(streams) != 1 {
			t.Fatalf("model log has %d streams, want 1", len(streams))
		}
		sent := streams[0].Sent
		if len(arrived) != 6 || len(sent) != 6 {
			t.Fatalf("events arrived %d, sent %d, want 6 each (5 and [DONE])", len(arrived), len(sent))
		}
		const tolerance = testModelGap / 2
		for i := range sent {
			want := fmt.Sprintf(`"content":"lab-event-%d"`, i)
			if i == 5 {
				want = "[DONE]"
			}
			if !strings.Contains(payloads[i], want) {
				t.Errorf("event %d = %s, want it to contain %s", i, payloads[i], want)
			}
			if d := arrived[i].Sub(sent[i]); d < -tolerance || d > tolerance {
				t.Errorf("event %d arrived %v after it was sent, want within ±%v", i, d, tolerance)
			}
			if i > 0 {
				if gap := sent[i].Sub(sent[i-1]); gap < testModelGap {
					t.Errorf("events %d and %d sent %v apart, want at least %v", i-1, i, gap, testModelGap)
				}
			}
		}
	})

	t.Run("without the hypervisor NAT the guest's own address leaks and nothing answers", func(t *testing.T) {
		dumpOnFailure(t, l)
		if err := l.RemoveHypervisorNAT(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.RemoveHypervisorNAT(ctx); err != nil {
			t.Fatalf("second remove: %v", err)
		}
		resetLeaks(t, l)
		l.ResetLogs()
		if code := curlFails(t, l.Guest(), EchoURL); code != 28 {
			t.Errorf("curl exit code without NAT = %d, want 28 (timeout)", code)
		}
		if lk := leaks(t, l); lk.TCP == 0 {
			t.Errorf("leaks = %v, want the guest's SYNs counted", lk)
		}
		if hl := l.HTTPLog(); len(hl) != 0 {
			t.Errorf("http log = %v, want empty", hl)
		}
		if err := l.RestoreHypervisorNAT(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := curl(t, l.Guest(), EchoURL), HostUplinkAddr; got != want {
			t.Errorf("echo after restoring NAT = %q, want %q", got, want)
		}
	})
}

// icmpEcho builds an ICMP echo request.
func icmpEcho(id, seq uint16) []byte {
	b := []byte{8, 0, 0, 0, 0, 0, 0, 0, 'l', 'a', 'b'}
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(b[2:], ^uint16(sum))
	return b
}

func netnsList(t *testing.T) string {
	t.Helper()
	out, err := runCmd(context.Background(), 10*time.Second, "", "ip", "netns", "list")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestCloseRemovesEverything(t *testing.T) {
	l := newTestLab(t, Options{SocksUser: "agent", SocksPassword: "s3cret"})
	ctx := context.Background()

	t.Run("go-socks5 demands the password", func(t *testing.T) {
		dumpOnFailure(t, l)
		if got, want := curl(t, l.Host(), "--socks5-hostname", GoSocksAddr, "--proxy-user", "agent:s3cret", EchoURL), ExitAddr; got != want {
			t.Errorf("echo with credentials = %q, want %q", got, want)
		}
		curlFails(t, l.Host(), "--socks5-hostname", GoSocksAddr, EchoURL)
		curlFails(t, l.Host(), "--socks5-hostname", GoSocksAddr, "--proxy-user", "agent:wrong", EchoURL)
	})

	// A process the caller left running inside the lab.
	sleeper := l.Guest().Command(ctx, "sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	sleeperDone := make(chan error, 1)
	go func() { sleeperDone <- sleeper.Wait() }()

	names := []string{l.Inet().Name(), l.Host().Name(), l.Guest().Name()}
	pids := []int{l.DantePID(), sleeper.Process.Pid}
	for _, name := range names {
		p, err := nsPIDs(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, p...)
	}
	tmp, _ := filepath.Glob(filepath.Join(os.TempDir(), l.ID()+"-dante-*"))
	if len(tmp) != 1 {
		t.Fatalf("dante directories = %v, want 1", tmp)
	}
	t.Logf("before Close: namespaces %v, pids %v, temp %v", names, pids, tmp)

	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	list := netnsList(t)
	for _, name := range names {
		if strings.Contains(list, name) {
			t.Errorf("namespace %s still listed:\n%s", name, list)
		}
		if _, err := os.Stat(filepath.Join(etcNetnsDir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s/%s: %v, want it gone", etcNetnsDir, name, err)
		}
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("pid %d still runs after Close", pid)
		}
	}
	if _, err := os.Stat(tmp[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: %v, want it gone", tmp[0], err)
	}
	select {
	case err := <-sleeperDone:
		if err == nil {
			t.Error("the leftover sleep exited cleanly, want it killed")
		}
	case <-time.After(5 * time.Second):
		t.Error("the leftover sleep still runs 5 s after Close")
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if _, err := l.Inet().Listen(ctx, "tcp", "127.0.0.1:0"); !errors.Is(err, ErrClosed) {
		t.Errorf("Listen after Close = %v, want ErrClosed", err)
	}
	if _, err := l.Guest().Run(ctx, "true"); err == nil {
		t.Error("Run after Close succeeded, want an error")
	}
	if len(l.HTTPLog()) == 0 {
		t.Error("http log is empty after Close, want the requests kept")
	}
}

// TestNewFailureLeavesNothing interrupts New at various points through its context and checks
// that nothing of this process's labs remains.
func TestNewFailureLeavesNothing(t *testing.T) {
	roottest.Require(t, labTools...)
	own := fmt.Sprintf("rl%d-", os.Getpid())
	var failed int
	for _, d := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, 60 * time.Millisecond, 100 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		l, err := New(ctx, Options{})
		cancel()
		if err == nil {
			if err := l.Close(); err != nil {
				t.Errorf("Close after New with %v: %v", d, err)
			}
		} else {
			failed++
			t.Logf("New with %v: %v", d, firstLine(err.Error()))
		}
		if list := netnsList(t); strings.Contains(list, own) {
			t.Fatalf("after New with %v: namespaces left:\n%s", d, list)
		}
		for _, dir := range []string{etcNetnsDir, os.TempDir()} {
			for _, name := range dirNames(dir) {
				if strings.HasPrefix(name, own) {
					t.Errorf("after New with %v: %s/%s left", d, dir, name)
				}
			}
		}
	}
	if failed == 0 {
		t.Error("New never failed: the test interrupted nothing")
	}
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

const crashHelperEnv = "LAB_CRASH_HELPER"

// TestCrashHelper is the child of TestNewAfterCrash: it builds a lab, reports it and waits to
// be killed. Run on its own it does nothing.
func TestCrashHelper(t *testing.T) {
	if os.Getenv(crashHelperEnv) != "1" {
		t.Log("helper process of TestNewAfterCrash; nothing to do on its own")
		return
	}
	l, err := New(context.Background(), Options{})
	if err != nil {
		fmt.Printf("LAB_ERROR %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("LAB_READY %s %d\n", l.ID(), l.DantePID())
	time.Sleep(60 * time.Second) // not ordering: the helper waits to be killed, the event; 60 s is its ceiling
	l.Close()
}

func TestNewAfterCrash(t *testing.T) {
	roottest.Require(t, labTools...)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	child := exec.CommandContext(ctx, exe, "-test.run=^TestCrashHelper$", "-test.timeout=90s")
	child.Env = append(os.Environ(), crashHelperEnv+"=1")
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr TailBuffer
	stderr.Max = 8 << 10
	child.Stderr = &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var staleID string
	var stalePID int
	for staleID == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("helper ended before its lab was up: %s", stderr.String())
			}
			if _, err := fmt.Sscanf(line, "LAB_READY %s %d", &staleID, &stalePID); err != nil {
				staleID = ""
				t.Logf("helper: %s", line)
			}
		case <-ctx.Done():
			t.Fatalf("helper did not report its lab: %s", stderr.String())
		}
	}
	if err := child.Process.Kill(); err != nil { // the crash
		t.Fatal(err)
	}
	_ = child.Wait()
	t.Logf("killed helper %d with lab %s (danted %d)", child.Process.Pid, staleID, stalePID)

	stale := []string{staleID + "-inet", staleID + "-host", staleID + "-guest"}
	list := netnsList(t)
	for _, name := range stale {
		if !strings.Contains(list, name) {
			t.Fatalf("namespace %s of the killed helper is not listed, the crash left nothing to clean:\n%s", name, list)
		}
	}

	t.Logf("after the crash: danted %d running: %v", stalePID, running(stalePID))
	l := newTestLab(t, Options{})
	list = netnsList(t)
	for _, name := range stale {
		if strings.Contains(list, name) {
			t.Errorf("stale namespace %s survived New:\n%s", name, list)
		}
		if _, err := os.Stat(filepath.Join(etcNetnsDir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale %s/%s: %v, want it gone", etcNetnsDir, name, err)
		}
	}
	if running(stalePID) {
		t.Errorf("danted %d of the killed helper still runs", stalePID)
	}
	if tmp, _ := filepath.Glob(filepath.Join(os.TempDir(), staleID+"-dante-*")); len(tmp) != 0 {
		t.Errorf("stale temporary directories %v survived New", tmp)
	}
	if got, want := curl(t, l.Guest(), EchoURL), HostUplinkAddr; got != want {
		t.Errorf("echo from the new lab's guest = %q, want %q", got, want)
	}
	if got, want := curl(t, l.Host(), "--socks5-hostname", DanteAddr, EchoURL), ExitAddr; got != want {
		t.Errorf("echo through the new lab's dante = %q, want %q", got, want)
	}
}

// BenchmarkNetnsDo measures the cost of one switch into a namespace and back (the overhead of
// every Listen and Dial helper, go-socks5's outgoing dials included).
func BenchmarkNetnsDo(b *testing.B) {
	l, err := New(context.Background(), Options{})
	if err != nil {
		b.Fatalf("New: %v", err)
	}
	defer l.Close()
	b.ResetTimer()
	for b.Loop() {
		if err := l.Inet().Do(func() error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
