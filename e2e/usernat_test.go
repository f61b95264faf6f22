//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/roottest"
)

// userNATConfig cages QEMU's user-space NATs by the preset alone (hypervisors = ["qemu"],
// local = false): their flows go through the proxy by the caged rule, the model is reached
// at the gateway (127.0.0.1:47831 on the host), and the default rule sends the host's own
// traffic direct. The router's metrics page listens on the host's loopback.
func userNATConfig() string {
	return fmt.Sprintf(`
[proxy.exit]
address = %q

[capture]
hypervisors = ["qemu"]
local = false

[[forward]]
name = "model"
listen = "10.0.2.2:47831"
connect = "127.0.0.1:47831"
allow = ["10.0.2.15/32"]

%s
[[rule]]
name = "model-direct"
hosts = ["127.0.0.1"]
ports = [47831]
action = "direct"

[[rule]]
name = "caged"
caged = true
action = "proxy"

[[rule]]
name = "default"
action = "direct"
`, lab.GoSocksAddr, userNATTables)
}

// userNATTables are the tables of a user-space NAT's scene besides its capture, forward and
// rules: the lab resolver, the router's metrics page on the host's loopback (a host service
// the guest must not reach), a short connect timeout.
const userNATTables = `
[dns]
resolver = "203.0.113.10:53"

[metrics]
listen = "127.0.0.1:9464"

[relay]
connect_timeout = "3s"
`

// udpHostService counts the datagrams a UDP service of the host on address receives.
func (s *scene) udpHostService(address string) *atomic.Int32 {
	s.t.Helper()
	pc, err := s.lab.Host().ListenPacket(s.ctx, "udp", address)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { pc.Close() })
	got := new(atomic.Int32)
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			got.Add(1)
			pc.WriteTo(append([]byte("host service heard "), buf[:n]...), from)
		}
	}()
	return got
}

// hostServices are the host's services a user-space NAT guest must never reach, on the
// host's loopback, each counting what it received.
type hostServices struct {
	tcp, tcp6, udp, udp6 *atomic.Int32
}

func (s *scene) startHostServices() hostServices {
	return hostServices{
		tcp:  s.hostService("127.0.0.1:2222", "host service\n"),
		tcp6: s.hostService("[::1]:2222", "host service\n"),
		udp:  s.udpHostService("127.0.0.1:2223"),
		udp6: s.udpHostService("[::1]:2223"),
	}
}

// wantWalls tries every host service from the guest through its gateway: TCP 2222, UDP
// 2223, IPv6 where the NAT offers it, the router's metrics page; all must fail and the
// services hear nothing.
func (s *scene) wantWalls(state string, u *lab.UserNAT, hs hostServices) {
	s.t.Helper()
	gws := []string{u.Gateway}
	if u.Gateway6 != "" {
		gws = append(gws, u.Gateway6)
	}
	for _, gw := range gws {
		for _, port := range []string{"2222", "9464"} {
			dst := net.JoinHostPort(gw, port)
			ctx, cancel := context.WithTimeout(s.ctx, 3*time.Second)
			c, err := u.Guest.Dial(ctx, "tcp", dst)
			cancel()
			if err == nil {
				c.SetDeadline(time.Now().Add(time.Second))
				b := make([]byte, 64)
				n, _ := c.Read(b)
				c.Close()
				if n > 0 {
					s.t.Errorf("%s: %s guest reached the host at %s (tcp): %q", state, u.Kind, dst, b[:n])
				}
			}
		}
		dst := net.JoinHostPort(gw, "2223")
		if c, err := u.Guest.Dial(s.ctx, "udp", dst); err == nil {
			c.Write([]byte("guest"))
			c.SetReadDeadline(time.Now().Add(time.Second))
			if n, err := c.Read(make([]byte, 64)); err == nil {
				s.t.Errorf("%s: %s guest got an answer from the host at %s (udp): %d bytes", state, u.Kind, dst, n)
			}
			c.Close()
		}
	}
	time.Sleep(100 * time.Millisecond) // not ordering: a window for a connection or datagram that must not come; no event says none will
	for name, n := range map[string]*atomic.Int32{"tcp 127.0.0.1:2222": hs.tcp, "tcp [::1]:2222": hs.tcp6,
		"udp 127.0.0.1:2223": hs.udp, "udp [::1]:2223": hs.udp6} {
		if v := n.Load(); v != 0 {
			s.t.Errorf("%s: the host's service %s heard %s's guest %d times", state, name, u.Kind, v)
		}
	}
}

// wantOutClosed: with the router stopped or killed, the guest gets nowhere: no page, no
// name, and nothing reaches the outside from the host.
func (s *scene) wantOutClosed(state string, u *lab.UserNAT) {
	s.t.Helper()
	s.lab.ResetLogs()
	if out, code := s.curl(u.Guest, lab.EchoURL, "--max-time", "3"); code == 0 {
		s.t.Errorf("%s: the %s guest fetched the echo page: %q", state, u.Kind, out)
	}
	if out, code := run(s.ctx, u.Guest, "dig", "+time=1", "+tries=1", "+short", lab.EchoName); code == 0 && strings.TrimSpace(out) != "" {
		s.t.Errorf("%s: the %s guest resolved %s: %q", state, u.Kind, lab.EchoName, out)
	}
	if n := len(s.lab.HTTPLog()); n != 0 {
		s.t.Errorf("%s: the echo server heard %d requests", state, n)
	}
	for _, q := range s.lab.DNSLog() {
		s.t.Errorf("%s: the DNS server was asked by %v", state, q)
	}
	s.wantNoLeak(state)
}

// wantOut: with the router running the guest's page and name go through the proxy (the
// echo server sees the exit address; the lab DNS is never asked by the host), and the model
// answers at the gateway.
func (s *scene) wantOut(u *lab.UserNAT) {
	s.t.Helper()
	s.lab.ResetLogs()
	if out, code := s.curl(u.Guest, lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		s.t.Errorf("%s guest by address: exit %d, %q; want the proxy's exit %s", u.Kind, code, out, lab.ExitAddr)
	}
	if out, code := s.curl(u.Guest, "http://"+lab.EchoName+"/"); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		s.t.Errorf("%s guest by name: exit %d, %q; want the proxy's exit %s", u.Kind, code, out, lab.ExitAddr)
	}
	for _, q := range s.lab.DNSLog() {
		if q.Source.Addr().String() == lab.HostUplinkAddr || q.Source.Addr().String() == lab.HostUplinkAddr6 {
			s.t.Errorf("%s guest: the outside resolver was asked by the host itself: %v", u.Kind, q)
		}
	}
	model := "http://" + net.JoinHostPort(u.Gateway, "47831") + "/v1/models"
	if out, code := s.curl(u.Guest, model); code != 0 || !strings.Contains(out, lab.ModelID) {
		s.t.Errorf("%s guest: the model at the gateway: exit %d, %q", u.Kind, code, out)
	}
	s.wantNoLeak(u.Kind + " guest, router running")
}

// TestUserNATGuests: guests behind real user-space NATs (libslirp's slirp4netns, passt's
// pasta, which Debian runs as passt.avx2), caged by the qemu preset alone: through the
// proxy by address and by name, the model at the gateway, and every host service on
// loopback refused (TCP, UDP, IPv6, the router's metrics), with the router running,
// stopped and SIGKILLed.
func TestUserNATGuests(t *testing.T) {
	for _, kind := range []string{lab.Slirp4netns, lab.Pasta} {
		t.Run(kind, func(t *testing.T) { testUserNAT(t, kind, false) })
	}
}

// TestUserNATStubResolver: the host's resolver is a loopback stub (127.0.0.53, as
// systemd-resolved's) that forwards to the outside resolver; the NAT forwards the guest's
// queries to it, and the router answers them: the outside resolver never hears the host.
func TestUserNATStubResolver(t *testing.T) {
	for _, kind := range []string{lab.Slirp4netns, lab.Pasta} {
		t.Run(kind, func(t *testing.T) { testUserNAT(t, kind, true) })
	}
}

// natComm is the name the NAT process of kind runs as: Debian's pasta re-executes itself as
// passt.avx2 where the CPU has AVX2.
func natComm(kind string) string {
	if kind == lab.Pasta {
		if b, err := os.ReadFile("/proc/cpuinfo"); err == nil && strings.Contains(string(b), " avx2") {
			return "passt.avx2"
		}
		return "passt"
	}
	return kind
}

// TestUncagedNATWarned: with a pasta guest running and no preset or rule that cages its
// process, status warns that it runs uncaged.
func TestUncagedNATWarned(t *testing.T) {
	roottest.Require(t, "pasta")
	cfg := strings.Replace(userNATConfig(), `hypervisors = ["qemu"]`, `hypervisors = ["virtualbox"]`, 1)
	s := newLab(t, cfg)
	u, err := s.lab.AddUserNATGuest(s.ctx, lab.Pasta)
	if err != nil {
		t.Fatal(err)
	}
	s.startRouter()
	out, code := s.routerCmd("status", "--config", s.cfg)
	if want := fmt.Sprintf("warning: %s (pid %d) is a hypervisor's user-space NAT and runs uncaged", natComm(lab.Pasta), u.Proc.PID()); code != 0 || !strings.Contains(out, want) {
		t.Errorf("router status: exit %d; want %q:\n%s", code, want, out)
	}
}

// TestPastaByItsName: a user who writes apps = ["pasta"] (no preset) cages the process that
// pasta really runs as (passt.avx2): out through the proxy, the host's services refused.
func TestPastaByItsName(t *testing.T) {
	roottest.Require(t, "pasta")
	cfg := strings.Replace(userNATConfig(), `hypervisors = ["qemu"]`, `hypervisors = []`, 1)
	cfg = strings.Replace(cfg, "name = \"caged\"\ncaged = true", "name = \"pasta\"\napps = [\"pasta\"]", 1)
	s := newLab(t, cfg)
	u, err := s.lab.AddUserNATGuest(s.ctx, lab.Pasta)
	if err != nil {
		t.Fatal(err)
	}
	hs := s.startHostServices()
	s.startRouter()
	s.wantOut(u)
	s.wantWalls("router running", u, hs)
	s.stopRouter(syscall.SIGKILL)
	s.wantOutClosed("router killed", u)
	s.wantWalls("router killed", u, hs)
}

func testUserNAT(t *testing.T, kind string, stub bool) {
	roottest.Require(t, kind)
	s := newLab(t, userNATConfig())
	if stub {
		if err := s.lab.UseStubResolver(s.ctx); err != nil {
			t.Fatal(err)
		}
	}
	u, err := s.lab.AddUserNATGuest(s.ctx, kind)
	if err != nil {
		t.Fatal(err)
	}
	hs := s.startHostServices()
	s.startRouter()
	s.wantOut(u)
	s.wantWalls("router running", u, hs)
	// Status lists the NAT's process among the caged, and warns of none of this lab's.
	out, code := s.routerCmd("status", "--config", s.cfg)
	if code != 0 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(natComm(kind))+`\s+`+strconv.Itoa(u.Proc.PID())+`\s`).MatchString(out) {
		t.Errorf("router status: exit %d; want %s (pid %d) among the caged processes:\n%s", code, natComm(kind), u.Proc.PID(), out)
	}
	if strings.Contains(out, "pid "+strconv.Itoa(u.Proc.PID())+")") {
		t.Errorf("router status warns of the caged %s:\n%s", kind, out)
	}
	if stub {
		return
	}
	s.stopRouter(syscall.SIGTERM)
	s.wantOutClosed("router stopped", u)
	s.wantWalls("router stopped", u, hs)
	s.startRouter()
	s.stopRouter(syscall.SIGKILL)
	s.wantOutClosed("router killed", u)
	s.wantWalls("router killed", u, hs)
}
