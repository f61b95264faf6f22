//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/roottest"
	"github.com/agentcage/router/internal/wait"
)

// reload sends SIGHUP and waits for the router to say it reloaded once more.
func reload(s *scene) {
	s.t.Helper()
	n := strings.Count(s.log(), "reloaded")
	s.router.Signal(syscall.SIGHUP)
	if !wait.Poll(5*time.Second, func() bool { return strings.Count(s.log(), "reloaded") > n }) {
		s.t.Fatalf("no reload in 5 s:\n%s", s.log())
	}
}

// chainConfig: the guest leaves through [proxy.tiny] (Debian's tinyproxy, HTTP CONNECT with
// Basic credentials) reached through [proxy.dante] (Debian's danted, SOCKS5), or through
// [proxy.old] (danted again, spoken to as SOCKS4) when vmProxy says so; DNS goes through
// dante. first is the dante proxy's address.
func chainConfig(passwordFile, first, vmProxy string) string {
	return fmt.Sprintf(`
[proxy.dante]
address = %q

[proxy.tiny]
type = "http"
address = %q
via = "dante"
username = %q
password_file = %q

[proxy.old]
type = "socks4"
address = %q

[capture]
vm_networks = ["10.0.2.0/24"]

[dns]
resolver = "203.0.113.10:53"
proxy = "dante"

[relay]
idle_timeout = "10m"
connect_timeout = "3s"

[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"
proxy = %q

[[rule]]
name = "default"
action = "direct"
`, first, lab.TinyproxyAddr, tinyUser, passwordFile, lab.DanteAddr, vmProxy)
}

// TestChain: a chain of two real proxies nobody here wrote, tinyproxy behind dante, carries
// the guest's flow by address and by name; the echo server sees tinyproxy's exit address
// (the last hop's), and neither the guest nor the host asked the DNS server; check-proxy
// reports both hops; with the first hop dead every flow fails closed and nothing leaves.
//
// The same dante as a SOCKS4 upstream carries a flow by address; by name (SOCKS4a) it
// refuses: danted 1.4.2 takes the SOCKS4a marker address 0.0.0.1 for the destination and
// answers 91, so the flow is refused at once, and the name is never resolved on this side.
// (A SOCKS4a server that resolves, socks4test's, carries names in upstream's loopback test.)
func TestChain(t *testing.T) {
	roottest.Require(t, "tinyproxy")
	s := newLab(t, "")
	tp, err := s.lab.StartTinyproxy(s.ctx, lab.TinyproxyOptions{User: tinyUser, Password: tinyPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tinyproxy:\n%s\ndante:\n%s", tp.Output(), s.lab.DanteOutput())
		}
	})
	pw := filepath.Join(s.dir, "tiny.password")
	if err := os.WriteFile(pw, []byte(tinyPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.writeConfig(chainConfig(pw, lab.DanteAddr, "tiny"))
	s.startRouter()
	s.lab.ResetLogs()

	for _, byName := range []bool{false, true} {
		if got := s.exitOf(byName); got != lab.TinyproxyExitAddr {
			t.Fatalf("by name %v: the echo server saw %q; want the last hop's (tinyproxy's) exit %s", byName, got, lab.TinyproxyExitAddr)
		}
	}
	for _, q := range s.lab.DNSLog() {
		if a := q.Source.Addr().String(); a == lab.GuestAddr || a == lab.HostUplinkAddr {
			t.Errorf("the DNS server heard %v", q)
		}
	}
	s.waitLog("proxy=tiny", 5*time.Second)
	s.wantNoLeak("through the chain")

	// check-proxy reports both hops, the last one reached through the first.
	out, code := run(s.ctx, s.lab.Host(), routerBin, "check-proxy", "--config", s.cfg, "--proxy", "tiny",
		"--echo", "http://"+lab.EchoName+"/", "--timeout", "5s")
	if code != 0 || !strings.Contains(out, "proxy dante (socks5") || !strings.Contains(out, "proxy tiny (http") ||
		!strings.Contains(out, "through dante") || !strings.Contains(out, "=> ok: exit "+lab.TinyproxyExitAddr) {
		t.Errorf("check-proxy of the chain: exit %d\n%s", code, out)
	}
	if strings.Contains(out, tinyPassword) {
		t.Errorf("check-proxy printed the password:\n%s", out)
	}

	// SOCKS4 through dante: by address it carries, by name dante refuses.
	s.writeConfig(chainConfig(pw, lab.DanteAddr, "old"))
	reload(s)
	s.lab.ResetLogs()
	if got := s.exitOf(false); got != lab.ExitAddr {
		t.Errorf("SOCKS4 by address: the echo server saw %q; want dante's exit %s", got, lab.ExitAddr)
	}
	s.waitLog("proxy=old", 5*time.Second)
	start := time.Now()
	if got := s.exitOf(true); got != "" {
		t.Errorf("SOCKS4a by name through danted: the echo server saw %q; danted 1.4.2 refuses SOCKS4a, so the flow should be refused", got)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the SOCKS4a refusal took %v", d)
	}
	for _, q := range s.lab.DNSLog() {
		if a := q.Source.Addr().String(); a == lab.GuestAddr || a == lab.HostUplinkAddr {
			t.Errorf("the DNS server heard %v", q)
		}
	}
	s.wantNoLeak("through SOCKS4")

	// The first hop dead: nothing answers at its address (a port the leak counter takes for
	// a proxy's, so the router's tries are not leaks); every flow fails, none leaves.
	if out, code := run(s.ctx, s.lab.Inet(), "nft", "add", "element", "inet", lab.LeakTable, "proxy_ports", "{ 1099 }"); code != 0 {
		t.Fatalf("leak counter: %s", out)
	}
	s.writeConfig(chainConfig(pw, "198.51.100.1:1099", "tiny"))
	reload(s)
	s.lab.ResetLogs()
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code == 0 {
		t.Errorf("with the first hop dead the guest fetched %q", out)
	}
	if n := len(s.lab.HTTPLog()); n != 0 {
		t.Errorf("with the first hop dead the echo server heard %d requests", n)
	}
	s.wantNoLeak("first hop dead")
	if strings.Contains(s.log(), tinyPassword) {
		t.Errorf("the password is in the router's log")
	}
}
