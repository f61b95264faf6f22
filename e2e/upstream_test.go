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

// The upstreams nobody here wrote, other than SOCKS5: Debian's tinyproxy as an HTTP CONNECT
// proxy with Basic credentials, leaving from its own exit address (lab.TinyproxyExitAddr),
// and failover between it and go-socks5 (lab.ExitAddr).

const (
	tinyUser     = "agent"
	tinyPassword = "tiny-Secret-pw-7"
	wrongTiny    = "wrong-Secret-pw-9"
)

// upstreamConfig is a scene config with tinyproxy as [proxy.tiny] (type http, its password
// in passwordFile) and go-socks5 as [proxy.exit]; the VM's rule goes through vmProxy (a TOML
// value: a name or a list). DNS goes through go-socks5.
func upstreamConfig(passwordFile, vmProxy string) string {
	return fmt.Sprintf(`
[proxy.tiny]
type = "http"
address = %q
username = %q
password_file = %q

[proxy.exit]
address = %q

[capture]
vm_networks = ["10.0.2.0/24"]

[dns]
resolver = "203.0.113.10:53"
proxy = "exit"

[relay]
idle_timeout = "10m"
connect_timeout = "3s"

[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"
proxy = %s

[[rule]]
name = "default"
action = "direct"
`, lab.TinyproxyAddr, tinyUser, passwordFile, lab.GoSocksAddr, vmProxy)
}

// upstreamScene builds the lab with tinyproxy running and the router on upstreamConfig.
func upstreamScene(t *testing.T, vmProxy string) (*scene, *lab.Tinyproxy, string) {
	t.Helper()
	roottest.Require(t, "tinyproxy")
	s := newLab(t, "")
	tp, err := s.lab.StartTinyproxy(s.ctx, lab.TinyproxyOptions{User: tinyUser, Password: tinyPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tinyproxy:\n%s", tp.Output())
		}
	})
	pw := filepath.Join(s.dir, "tiny.password")
	if err := os.WriteFile(pw, []byte(tinyPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.writeConfig(upstreamConfig(pw, vmProxy))
	s.startRouter()
	return s, tp, pw
}

// exitOf fetches the echo page from the guest (by name when byName) and returns the address
// the echo server saw, or "" when the fetch failed.
func (s *scene) exitOf(byName bool) string {
	url := lab.EchoURL
	if byName {
		url = "http://" + lab.EchoName + "/"
	}
	out, code := s.curl(s.lab.Guest(), url)
	if code != 0 {
		return ""
	}
	return strings.TrimSpace(out)
}

// TestHTTPUpstream: the guest leaves through tinyproxy (HTTP CONNECT, Basic credentials) with
// tinyproxy's exit address, by address and by name (the name resolved by tinyproxy, not by
// the host); with a wrong password every flow fails, nothing leaves otherwise, and neither
// password is ever in the router's log.
func TestHTTPUpstream(t *testing.T) {
	s, _, pw := upstreamScene(t, `"tiny"`)
	s.lab.ResetLogs()
	if got := s.exitOf(false); got != lab.TinyproxyExitAddr {
		t.Fatalf("by address: the echo server saw %q; want tinyproxy's exit %s", got, lab.TinyproxyExitAddr)
	}
	if got := s.exitOf(true); got != lab.TinyproxyExitAddr {
		t.Fatalf("by name: the echo server saw %q; want %s", got, lab.TinyproxyExitAddr)
	}
	for _, q := range s.lab.DNSLog() {
		if a := q.Source.Addr().String(); a == lab.GuestAddr || a == lab.HostUplinkAddr {
			t.Errorf("the DNS server heard %v", q)
		}
	}
	s.waitLog("proxy=tiny", 5*time.Second)
	s.wantNoLeak("through tinyproxy")

	// A wrong password: tinyproxy refuses the CONNECT, the flow fails closed.
	if err := os.WriteFile(pw, []byte(wrongTiny+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.router.Signal(syscall.SIGHUP)
	s.waitLog("reloaded", 5*time.Second)
	s.lab.ResetLogs()
	start := time.Now()
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code == 0 {
		t.Errorf("with a wrong password the guest fetched %q", out)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("with a wrong password the guest waited %v for its refusal", d)
	}
	if n := len(s.lab.HTTPLog()); n != 0 {
		t.Errorf("with a wrong password the echo server heard %d requests", n)
	}
	// tinyproxy answers wrong credentials with 401 (407 only when they are missing).
	s.waitLog("proxy answered 40", 5*time.Second)
	s.wantNoLeak("wrong password")
	for _, secret := range []string{tinyPassword, wrongTiny} {
		if strings.Contains(s.log(), secret) {
			t.Errorf("a password is in the router's log:\n%s", s.log())
		}
	}
}

// TestFailover: the VM's rule lists tinyproxy, then go-socks5. While tinyproxy runs the guest
// leaves with its exit address; when it dies the next flow already leaves through go-socks5
// (another exit address), never direct; when it comes back, flows return to it once its
// backoff (1 s, doubling) ends.
func TestFailover(t *testing.T) {
	s, tp, _ := upstreamScene(t, `["tiny", "exit"]`)
	if got := s.exitOf(false); got != lab.TinyproxyExitAddr {
		t.Fatalf("primary up: the echo server saw %q; want tinyproxy's exit %s", got, lab.TinyproxyExitAddr)
	}
	if err := tp.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		start := time.Now()
		if got := s.exitOf(i == 1); got != lab.ExitAddr {
			t.Fatalf("primary down, flow %d: the echo server saw %q; want go-socks5's exit %s", i, got, lab.ExitAddr)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("primary down, flow %d took %v", i, d)
		}
	}
	s.waitLog("upstream down", 5*time.Second)
	s.wantNoLeak("primary down")

	if err := tp.Start(s.ctx); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "flows back on the primary", 20*time.Second, func() bool {
		got := s.exitOf(false)
		if got != lab.TinyproxyExitAddr && got != lab.ExitAddr {
			t.Fatalf("primary back: the echo server saw %q", got)
		}
		return got == lab.TinyproxyExitAddr
	})
	s.waitLog("upstream up", 5*time.Second)
	s.wantNoLeak("primary back")
}

// TestGuestCannotMarkUpstreamDown: the guest asks tinyproxy again and again for a port
// nobody listens on (tinyproxy answers 500 for it). That is the destination's failure, not
// the proxy's: tinyproxy stays up, the failover list does not move to go-socks5, and the
// guest's next flow (and every other guest's) still leaves through tinyproxy.
func TestGuestCannotMarkUpstreamDown(t *testing.T) {
	s, _, _ := upstreamScene(t, `["tiny", "exit"]`)
	if got := s.exitOf(false); got != lab.TinyproxyExitAddr {
		t.Fatalf("before: the echo server saw %q; want tinyproxy's exit %s", got, lab.TinyproxyExitAddr)
	}
	for i := range 5 {
		if _, code := s.curl(s.lab.Guest(), "http://203.0.113.10:9/"); code == 0 {
			t.Fatalf("curl %d to a closed port succeeded", i)
		}
	}
	for _, u := range s.status().Upstreams {
		if u.Name == "tiny" && u.State != "up" {
			t.Errorf("after 5 unreachable destinations tinyproxy is %q (%s); want up", u.State, u.LastError)
		}
	}
	if got := s.exitOf(false); got != lab.TinyproxyExitAddr {
		t.Errorf("after: the echo server saw %q; want tinyproxy's exit %s (not the backup)", got, lab.TinyproxyExitAddr)
	}
	if strings.Contains(s.log(), "upstream down") {
		t.Errorf("the router marked an upstream down:\n%s", s.log())
	}
	s.wantNoLeak("unreachable destinations through tinyproxy")
}
