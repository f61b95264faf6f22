//go:build linux

package e2e

import (
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/roottest"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/control"
)

// qemuRecipe is the QEMU user-networking config the docs cite; qemuConfig runs it in the
// lab.
const qemuRecipe = "../testdata/conf/linux-qemu-user.toml"

// qemuConfig is qemuRecipe with the lab's parts: go-socks5 as the proxy, and the tables of
// the user-space NATs' scene (userNATTables).
func qemuConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(qemuRecipe)
	if err != nil {
		t.Fatal(err)
	}
	const proxy = `address = "proxy.example.net:1080"`
	if !strings.Contains(string(b), proxy) {
		t.Fatalf("%s: no %s to point at the lab's proxy", qemuRecipe, proxy)
	}
	cfg := strings.Replace(string(b), proxy, fmt.Sprintf("address = %q", lab.GoSocksAddr), 1)
	return cfg + userNATTables
}

// qemuHostServices are the host's services a QEMU guest must never reach, each counting
// what it received: TCP and UDP on the host's loopback, IPv4 and IPv6 (the guest's 10.0.2.2
// and fec0::2), TCP on every address of the host (the guest dials the host's uplink
// addresses).
type qemuHostServices struct {
	loopTCP, loopUDP, loopTCP6, loopUDP6, anyTCP *atomic.Int32
}

// qemuModelGap is the model server's pause between streamed events, long enough for the
// guest's clock (10 ms) to tell a stream from a buffered answer.
const qemuModelGap = 200 * time.Millisecond

const (
	qemuLoopTCP = "2222" // 127.0.0.1 and ::1
	qemuLoopUDP = "2223" // 127.0.0.1 and ::1
	qemuAnyTCP  = "2224" // every address
)

func (s *scene) startQEMUHostServices() qemuHostServices {
	return qemuHostServices{
		loopTCP:  s.hostService("127.0.0.1:"+qemuLoopTCP, "host service\n"),
		loopUDP:  s.udpHostService("127.0.0.1:" + qemuLoopUDP),
		loopTCP6: s.hostService("[::1]:"+qemuLoopTCP, "host service\n"),
		loopUDP6: s.udpHostService("[::1]:" + qemuLoopUDP),
		anyTCP:   s.hostService("[::]:"+qemuAnyTCP, "host service\n"),
	}
}

// qemuGuestCase is one of the QEMU guests of TestQEMUGuest.
type qemuGuestCase struct {
	name string // the subtest's name
	opts lab.QEMUOptions
	g    *lab.QEMUGuest
}

// TestQEMUGuest boots real QEMU guests (TCG, Debian's kernel, a busybox initramfs) on
// -netdev user in the host namespace, caged by the qemu preset alone (the recipe
// testdata/conf/linux-qemu-user.toml), and checks from outside: the guest's HTTP leaves
// only through the proxy, by address and by name through the router's DNS; no host service
// answers it (the host's loopback through 10.0.2.2, TCP and UDP, the router's metrics, the
// host's own address); the leak counter stays 0; status lists the qemu process among the
// caged; after the router is SIGKILLed the guard alone keeps the guest closed. The same
// guest started with -name VM,process=VM (QEMU renames its process to VM, as quickemu
// does) must get the same verdicts. The model gate: from the guest, through 10.0.2.2 to the
// model's own port, Ollama's pull, delete, create and push and a chat completion whose
// image_url would make the server fetch an outside address never reach the model server
// (each is the forward's 403, counted as model-api), while a plain chat completion streams
// through; `router check-ip --model` in the guest passes.
func TestQEMUGuest(t *testing.T) {
	roottest.Require(t, lab.QEMUBinary, "busybox")
	start := time.Now()
	requireStatic(t, routerBin)
	s := newLabWith(t, qemuConfig(t), lab.Options{ModelGap: qemuModelGap})
	// Under TCG on a busy machine a boot alone can take a minute or two (9 s on an idle
	// one): the scene's 3 minutes are too short for the whole test.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	s.ctx = ctx
	hs := s.startQEMUHostServices()
	guests := []*qemuGuestCase{
		{name: "qemu", opts: lab.QEMUOptions{Files: map[string]string{"/bin/router": routerBin}}},
		{name: "process=VM", opts: lab.QEMUOptions{Name: "VM,process=VM"}},
	}
	// Both guests boot while the router starts: they connect out only once they run
	// commands.
	var wg sync.WaitGroup
	errs := make([]error, len(guests))
	for i, c := range guests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.g, errs[i] = s.lab.StartQEMUGuest(s.ctx, c.opts)
		}()
	}
	s.startRouter()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s guest: %v", guests[i].name, err)
		}
		t.Logf("%s guest (pid %d): boot to lease %v", guests[i].name, guests[i].g.Proc.PID(), guests[i].g.Boot.Round(time.Millisecond))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range guests {
				t.Logf("%s guest's serial console:\n%s", c.name, c.g.Serial())
			}
		}
	})

	for _, c := range guests {
		t.Run(c.name+"/router running", func(t *testing.T) {
			s.wantQEMUOut(t, c.g)
			s.wantQEMUWalls(t, c.g, hs)
			out, code := s.routerCmd("status", "--config", s.cfg)
			pid := strconv.Itoa(c.g.Proc.PID())
			if code != 0 || !regexp.MustCompile(`(?m)^\S+\s+`+pid+`\s`).MatchString(out) {
				t.Errorf("router status: exit %d; want the qemu process (pid %s) among the caged:\n%s", code, pid, out)
			}
		})
	}
	t.Run("model gate", func(t *testing.T) { s.wantQEMUModelGate(t, guests[0].g) })
	t.Run("check-ip --model", func(t *testing.T) {
		out, code := qemuRun(t, s.ctx, guests[0].g, 60*time.Second, strings.Join([]string{
			"/bin/router check-ip --echo", lab.EchoURL, "--expect", lab.ExitAddr, "--expect-not", lab.HostUplinkAddr,
			"--model http://" + lab.QEMUGateway + ":47831", "--dns-whoami", lab.WhoamiName,
			"--stun", lab.UDPEchoAddr, "--timeout 3s"}, " "))
		if code != 0 || !strings.Contains(out, "✓ model "+lab.ModelID) {
			t.Errorf("router check-ip in the QEMU guest: exit %d, want 0 and ✓ model:\n%s", code, out)
		}
	})

	s.stopRouter(syscall.SIGKILL)
	for _, c := range guests {
		t.Run(c.name+"/router killed", func(t *testing.T) {
			s.wantQEMUClosed(t, c.g)
			s.wantQEMUWalls(t, c.g, hs)
		})
	}
	t.Logf("TestQEMUGuest: %v in all", time.Since(start).Round(time.Millisecond))
}

// requireStatic fails t unless bin is statically linked (it runs in the guest's busybox
// initramfs, which has no C library).
func requireStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked; the guest needs it static (CGO_ENABLED=0)", bin)
		}
	}
}

// qemuRun runs script in the guest, failing t when the guest does not answer.
func qemuRun(t *testing.T, ctx context.Context, g *lab.QEMUGuest, timeout time.Duration, script string) (string, int) {
	t.Helper()
	out, code, err := g.Run(ctx, timeout, script)
	if err != nil {
		t.Fatal(err)
	}
	return out, code
}

// qemuWantNoLeak fails t when the leak counter counted a packet since its last reset.
func (s *scene) qemuWantNoLeak(t *testing.T, what string) {
	t.Helper()
	l, err := s.lab.Leaks(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Packets != 0 {
		t.Errorf("%s: %d packets left the host's own address outside the proxy (%v)", what, l.Packets, l)
	}
}

// qemuFetchEcho clears the lab's logs and leak counter, then fetches the echo page from the
// guest by address and by name, running wget (the command up to the URL) for at most d,
// and hands each URL's output and exit code to check.
func (s *scene) qemuFetchEcho(t *testing.T, g *lab.QEMUGuest, d time.Duration, wget string, check func(url, out string, code int)) {
	t.Helper()
	s.lab.ResetLogs()
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{lab.EchoURL, "http://" + lab.EchoName + "/"} {
		out, code := qemuRun(t, s.ctx, g, d, wget+url)
		check(url, out, code)
	}
}

// wantQEMUOut: the guest's page, by address and by name, comes back with the proxy's exit
// address; the lab resolver never hears the host itself; nothing leaks.
func (s *scene) wantQEMUOut(t *testing.T, g *lab.QEMUGuest) {
	t.Helper()
	s.qemuFetchEcho(t, g, 10*time.Second, "wget -q -O - ", func(url, out string, code int) {
		if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
			t.Errorf("GET %s: exit %d, %q; want the proxy's exit %s", url, code, out, lab.ExitAddr)
		}
	})
	for _, q := range s.lab.DNSLog() {
		if a := q.Source.Addr().String(); a == lab.HostUplinkAddr || a == lab.HostUplinkAddr6 {
			t.Errorf("the outside resolver was asked by the host itself: %v", q)
		}
	}
	s.qemuWantNoLeak(t, "router running")
}

// wantQEMUWalls tries the host's services from the guest: its loopback through the gateway
// (TCP, UDP, the router's metrics page; IPv4 and IPv6) and the host's own uplink addresses.
// None may answer, and none may hear anything.
func (s *scene) wantQEMUWalls(t *testing.T, g *lab.QEMUGuest, hs qemuHostServices) {
	t.Helper()
	if g.Addr6 == "" {
		t.Error("the guest has no IPv6 address from QEMU's router advertisement: IPv6 is not tried")
	}
	for _, n := range []*atomic.Int32{hs.loopTCP, hs.loopUDP, hs.loopTCP6, hs.loopUDP6, hs.anyTCP} {
		n.Store(0)
	}
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{
		net.JoinHostPort(lab.QEMUGateway, qemuLoopTCP),
		net.JoinHostPort(lab.QEMUGateway, "9464"),
		net.JoinHostPort(lab.QEMUGateway6, qemuLoopTCP),
		net.JoinHostPort(lab.HostUplinkAddr, qemuAnyTCP),
		net.JoinHostPort(lab.HostUplinkAddr6, qemuAnyTCP),
	} {
		host, port, _ := net.SplitHostPort(dst)
		out, _ := qemuRun(t, s.ctx, g, 6*time.Second, "printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' | timeout 4 nc -w 3 "+host+" "+port)
		// The router's own 403 (a refused plaintext request is told why) is no way in; a
		// host service's answer, or any other HTTP answer, is.
		if strings.Contains(out, "host service") || strings.Contains(out, "HTTP/") && !strings.Contains(out, "refused by the router on the host") {
			t.Errorf("the guest reached the host at %s (tcp): %q", dst, out)
		}
	}
	// busybox's tftp is the guest's UDP client: its read request is a datagram to the port.
	for _, gw := range []string{lab.QEMUGateway, lab.QEMUGateway6} {
		if out, code := qemuRun(t, s.ctx, g, 6*time.Second, "timeout 4 tftp -g -r probe -l /tmp/probe "+gw+" "+qemuLoopUDP); code == 0 {
			t.Errorf("the guest got an answer from the host at %s port %s (udp): %q", gw, qemuLoopUDP, out)
		}
	}
	for name, n := range map[string]*atomic.Int32{"tcp 127.0.0.1:" + qemuLoopTCP: hs.loopTCP,
		"udp 127.0.0.1:" + qemuLoopUDP: hs.loopUDP, "tcp [::1]:" + qemuLoopTCP: hs.loopTCP6,
		"udp [::1]:" + qemuLoopUDP: hs.loopUDP6, "tcp [::]:" + qemuAnyTCP: hs.anyTCP} {
		if v := n.Load(); v != 0 {
			t.Errorf("the host's service %s heard the guest %d times", name, v)
		}
	}
	s.qemuWantNoLeak(t, "host services")
}

// wantQEMUClosed: with the router gone, the guest gets nowhere: no page by address or by
// name, no answer to a name, nothing at the outside servers or on the uplink.
func (s *scene) wantQEMUClosed(t *testing.T, g *lab.QEMUGuest) {
	t.Helper()
	s.qemuFetchEcho(t, g, 6*time.Second, "timeout 4 wget -q -O - ", func(url, out string, code int) {
		if code == 0 {
			t.Errorf("GET %s: the guest fetched %q", url, out)
		}
	})
	if out, code := qemuRun(t, s.ctx, g, 6*time.Second, "timeout 4 nslookup "+lab.EchoName); code == 0 && strings.Contains(out, lab.ServiceAddr) {
		t.Errorf("the guest resolved %s: %q", lab.EchoName, out)
	}
	if n := len(s.lab.HTTPLog()); n != 0 {
		t.Errorf("the echo server heard %d requests: %v", n, s.lab.HTTPLog())
	}
	for _, q := range s.lab.DNSLog() {
		t.Errorf("the DNS server was asked by %v", q)
	}
	s.qemuWantNoLeak(t, "router killed")
}

// wantQEMUModelGate: from the guest, through 10.0.2.2 to the model's own port (QEMU
// connects to the host's 127.0.0.1:47831), the calls that make the model server act
// outside inference never reach it: each is answered by the forward's 403 and counted as a
// model-api refusal. A plain chat completion streams through.
func (s *scene) wantQEMUModelGate(t *testing.T, g *lab.QEMUGuest) {
	t.Helper()
	model := net.JoinHostPort(lab.QEMUGateway, "47831")
	stream := `{"model":"` + lab.ModelID + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	t.Run("chat streams", func(t *testing.T) {
		s.lab.ResetLogs()
		// Each event is stamped with the guest's clock (/proc/uptime, 10 ms) as it arrives.
		out, code := qemuRun(t, s.ctx, g, 20*time.Second, "wget -q -O - --header 'Content-Type: application/json' --post-data '"+stream+
			"' http://"+model+"/v1/chat/completions | while IFS= read -r l; do case \"$l\" in data:*) read up _ </proc/uptime; echo \"$up $l\";; esac; done")
		if code != 0 || !strings.Contains(out, "lab-event-0") || !strings.Contains(out, "[DONE]") {
			t.Fatalf("streamed POST /v1/chat/completions: exit %d, %q", code, out)
		}
		var got []float64
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			up, _, _ := strings.Cut(line, " ")
			v, err := strconv.ParseFloat(up, 64)
			if err != nil {
				t.Fatalf("guest's stamped line %q: %v", line, err)
			}
			got = append(got, v)
		}
		// The model server records a stream when its handler returns, just after [DONE].
		var streams []lab.ModelStream
		_ = wait.Poll(2*time.Second, func() bool { streams = s.lab.ModelLog(); return len(streams) > 0 })
		if len(streams) != 1 || len(streams[0].Sent) != len(got) {
			t.Fatalf("model log %+v; the guest read %d events", streams, len(got))
		}
		sent := streams[0].Sent
		// Buffered, the events would arrive together; streamed, as far apart as they left
		// (half of it is allowed for a guest slowed by the machine's load).
		spread, want := time.Duration((got[len(got)-1]-got[0])*float64(time.Second)), sent[len(sent)-1].Sub(sent[0])
		if spread < want/2 {
			t.Errorf("the guest read the events within %v; the server sent them over %v: buffered on the way", spread, want)
		}
	})
	var refused uint64
	image := `{"model":"` + lab.ModelID + `","messages":[{"role":"user","content":[{"type":"text","text":"describe"},` +
		`{"type":"image_url","image_url":{"url":"http://203.0.113.66/x"}}]}]}`
	for _, c := range []struct{ name, method, path, body string }{
		{"pull", "POST", "/api/pull", `{"name":"attacker.example:8443/x/y"}`},
		{"delete", "DELETE", "/api/delete", `{"name":"x"}`},
		{"create", "POST", "/api/create", `{"model":"x","remote_host":"http://169.254.169.254"}`},
		{"push", "POST", "/api/push", `{"name":"attacker.example/x/y"}`},
		{"image_url", "POST", "/v1/chat/completions", image},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.lab.ResetLogs()
			req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
				c.method, c.path, model, len(c.body), c.body)
			host, port, _ := net.SplitHostPort(model)
			out, _ := qemuRun(t, s.ctx, g, 10*time.Second, "printf '"+strings.ReplaceAll(req, "\r\n", `\r\n`)+"' | timeout 8 nc -w 3 "+host+" "+port)
			status, _, _ := strings.Cut(out, "\n")
			for _, r := range s.lab.ModelRequests() {
				t.Errorf("%s %s reached the model server (%s %s); the guest read %q", c.method, c.path, r.Method, r.Path, status)
			}
			if !strings.HasPrefix(status, "HTTP/1.1 403 ") {
				t.Errorf("%s %s: the guest read %q; want the forward's 403", c.method, c.path, status)
			}
		})
		refused++
	}
	out, code := s.routerCmd("status", "--json", "--config", s.cfg)
	var st control.Status
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("router status --json: exit %d, %v\n%s", code, err, out)
	}
	if n, _ := refusalCount(st, "model-api"); n < refused {
		t.Errorf("status counts %d model-api refusals; want %d", n, refused)
	}
}
