//go:build linux

package e2e

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/router/control"
)

// TestRefusedNamesAnswered: the guest's dig of a name every flow would be refused to prints
// NXDOMAIN with the Extended DNS Error that says which rule refused it; an allowed name gets
// a fake IP; a DNS-tunnel stand-in under an allowed domain is refused past the budget with
// its own EDE, while another domain is still answered; both refusals are counted. The
// config is testdata/refused_names.toml.
func TestRefusedNamesAnswered(t *testing.T) {
	s := newScene(t, fixture(t, "refused_names.toml"))
	g := s.lab.Guest()
	dig := func(name string) string {
		out, _ := run(s.ctx, g, "dig", "+time=2", "+tries=1", "@"+lab.ServiceAddr, name)
		return out
	}
	for _, tc := range []struct{ name, want string }{
		{"telemetry.lab.test", `EDE: 15 (Blocked): (refused by the router on the host: rule #2 "telemetry" blocks it`},
		{"paste.example", `caged traffic, and no rule lets it out`},
	} {
		if out := dig(tc.name); !strings.Contains(out, "status: NXDOMAIN") || !strings.Contains(out, tc.want) {
			t.Errorf("dig %s: want NXDOMAIN with %q:\n%s", tc.name, tc.want, out)
		}
	}
	out, code := run(s.ctx, g, "dig", "+short", "+time=2", "+tries=1", "@"+lab.ServiceAddr, lab.EchoName)
	if a, err := netip.ParseAddr(strings.TrimSpace(out)); code != 0 || err != nil || !netip.MustParsePrefix("198.18.0.0/15").Contains(a) {
		t.Errorf("dig %s: exit %d, %q; want a fake IP", lab.EchoName, code, out)
	}
	refused := 0
	for i := range 30 {
		if out := dig(fmt.Sprintf("c%02d.tunnel.test", i)); strings.Contains(out, "status: NXDOMAIN") {
			refused++
			if !strings.Contains(out, "budget of 20 names under tunnel.test") {
				t.Errorf("the tunnel's name %d: NXDOMAIN without the budget's EDE:\n%s", i, out)
			}
		}
	}
	if refused != 10 {
		t.Errorf("%d of 30 tunnel names refused, want the 10 past the budget of 20", refused)
	}
	if out := dig(lab.EchoName); !strings.Contains(out, "status: NOERROR") {
		t.Errorf("another domain after the tunnel: want an answer:\n%s", out)
	}
	st := s.status()
	if n, _ := refusalCount(st, "budget"); n != 10 {
		t.Errorf("budget refusals counted: %d, want 10", n)
	}
	if n, _ := refusalCount(st, "rule"); n < 1 {
		t.Errorf("rule refusals counted: %d, want the blocked name", n)
	}
	shown := false // status shows the guest's names under the domain against the budget
	for _, b := range st.DomainBudgets {
		shown = shown || b.Budget == control.BudgetNames && b.Domain == "tunnel.test" && b.Used == 30 && b.Limit == 20 && b.Over
	}
	if !shown {
		t.Errorf("status: no names budget of 30 of 20 under tunnel.test: %+v", st.DomainBudgets)
	}
	s.wantNoLeak("guest DNS")
}

// TestRefusedFlowsAnswered: curl from the guest to a name whose plain HTTP a rule refuses
// prints the router's 403 text, naming the rule and how to allow it; a refused TLS flow is
// reset within 100 ms of its ClientHello (no wait), and curl says it was reset. The config
// is testdata/refused_http.toml.
func TestRefusedFlowsAnswered(t *testing.T) {
	s := newScene(t, fixture(t, "refused_http.toml"))
	g := s.lab.Guest()
	out, code := s.curl(g, "http://"+lab.EchoName+"/", "-i")
	for _, want := range []string{"HTTP/1.1 403 Forbidden", "router: " + lab.EchoName + ":80 refused",
		`rule #2 "no-plain-http" blocks it`, "the host's owner can allow it in the router's config"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("curl http://%s/: exit %d, want %q in:\n%s", lab.EchoName, code, want, out)
		}
	}

	ip, code := run(s.ctx, g, "dig", "+short", "+time=2", "+tries=1", "@"+lab.ServiceAddr, lab.EchoName)
	fake, err := netip.ParseAddr(strings.TrimSpace(ip))
	if code != 0 || err != nil {
		t.Fatalf("dig %s: exit %d, %q", lab.EchoName, code, ip)
	}
	for i := range 5 {
		c, err := g.Dial(s.ctx, "tcp", netip.AddrPortFrom(fake, 8443).String())
		if err != nil {
			t.Fatalf("dial %v:8443: %v", fake, err)
		}
		tc := tls.Client(c, &tls.Config{ServerName: lab.EchoName})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		err = tc.Handshake()
		took := time.Since(start)
		c.Close()
		var op *net.OpError
		if !errors.Is(err, syscall.ECONNRESET) && !(errors.As(err, &op) && strings.Contains(op.Error(), "reset")) {
			t.Fatalf("TLS to a refused port (%d): %v, want a reset", i, err)
		}
		if took > 100*time.Millisecond {
			t.Errorf("TLS to a refused port (%d): reset after %v, want within 100 ms", i, took)
		}
		t.Logf("TLS refused: reset %v after the ClientHello", took)
	}
	out, code = s.curl(g, "https://"+lab.EchoName+":8443/", "-k")
	if code == 0 || !strings.Contains(strings.ToLower(out), "reset") {
		t.Errorf("curl https://%s:8443/: exit %d, want a reset:\n%s", lab.EchoName, code, out)
	}
	s.wantNoLeak("refused flows")
}

// TestCheckIPWhy: `router check-ip --why` in the guest asks the router's DNS and prints its
// decision for this guest: the rule that refuses plain HTTP to the echo name (exit 1), the
// proxy rule that lets TLS out (exit 0); from the host, whose DNS the router does not answer
// here, no router answers (exit 3).
func TestCheckIPWhy(t *testing.T) {
	s := newScene(t, fixture(t, "refused_http.toml"))
	g := s.lab.Guest()
	for _, c := range []struct {
		dst  string
		code int
		want []string
	}{
		{lab.EchoName + ":80", 1, []string{"tcp " + lab.EchoName + ":80 from 10.0.2.15 (caged)", `rule #1 "echo-tls": no (ports)`,
			`verdict: block by rule #2 "no-plain-http"`, `refused by the router on the host: rule #2 "no-plain-http" blocks it`}},
		{lab.EchoName, 0, []string{`verdict: proxy via exit by rule #1 "echo-tls"`}},
		{"203.0.113.99:22", 1, []string{"caged traffic, and no rule lets it out"}},
	} {
		out, code := run(s.ctx, g, routerBin, "check-ip", "--why", c.dst, "--timeout", "3s")
		for _, w := range c.want {
			if code != c.code || !strings.Contains(out, w) {
				t.Errorf("check-ip --why %s: exit %d, want %d with %q:\n%s", c.dst, code, c.code, w, out)
			}
		}
	}
	out, code := run(s.ctx, s.lab.Host(), routerBin, "check-ip", "--why", lab.EchoName, "--timeout", "3s")
	if code != 3 || !strings.Contains(out, "no router answered") {
		t.Errorf("check-ip --why from the host: exit %d, want 3 (no router answered):\n%s", code, out)
	}
}

// gotThrough reports whether a guest's curl got through to its destination: it exited 0 with
// an answer other than the router's own refusal (the router answers a caged flow's refused
// plain HTTP request with a 403 that says why, and curl exits 0 on it).
func gotThrough(out string, code int) bool {
	return code == 0 && !strings.Contains(out, "refused by the router on the host")
}
