package checkip

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestWhyName: the why query's name is the wire form the router's DNS reads:
// PORT.HOST.why.router.invalid, an IPv6 address with '-' for ':'; the port defaults to 443.
func TestWhyName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"example.com", "443.example.com.why.router.invalid"},
		{"Example.COM.:80", "80.example.com.why.router.invalid"},
		{"203.0.113.7:22", "22.203.0.113.7.why.router.invalid"},
		{"[2001:db8::1]:8443", "8443.2001-db8--1.why.router.invalid"},
		{"2001:db8::1", "443.2001-db8--1.why.router.invalid"},
	} {
		host, port, err := ParseWhy(c.in)
		if err != nil {
			t.Errorf("ParseWhy(%q): %v", c.in, err)
			continue
		}
		if got := WhyName(host, port); got != c.want {
			t.Errorf("WhyName(ParseWhy(%q)) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, bad := range []string{"", ":80", "example.com:0", "example.com:65536", "example.com:http", "exa mple.com", "a..b", "[::1", "fe80::1%eth0"} {
		if _, _, err := ParseWhy(bad); err == nil {
			t.Errorf("ParseWhy(%q) accepted", bad)
		}
	}
}

// TestMainWhy: --why prints the router's answer and exits 1 when the flow is refused, 0
// when not, and 3 when no router answered (not behind one); it runs no other check.
func TestMainWhy(t *testing.T) {
	refused := "tcp example.com:443 from 10.0.2.15 (caged)\nverdict: block by (caged: no rule decides)\nrefused by the router on the host: caged traffic, and no rule lets it out"
	allowed := "tcp allowed.test:443 from 10.0.2.15 (caged)\nrule #1 \"echo\": matches\nverdict: proxy via exit by rule #1 \"echo\""
	res := fakeResolver{txt: map[string][]string{
		"443.example.com.why.router.invalid":  {refused[:100], refused[100:]},
		"443.allowed.test.why.router.invalid": {allowed},
	}}
	for _, c := range []struct {
		arg  string
		code int
		want string
	}{
		{"example.com", ExitFail, refused},
		{"allowed.test:443", ExitOK, allowed},
		{"elsewhere.test", ExitNoAnswer, "no router answered"},
	} {
		var stdout, stderr bytes.Buffer
		d := &loopbackDialer{}
		code := Main(context.Background(), []string{"--why", c.arg}, &stdout, &stderr, Deps{Dialer: d, Resolver: res})
		if code != c.code || !strings.Contains(stdout.String()+stderr.String(), c.want) {
			t.Errorf("--why %s: exit %d, want %d with %q:\n%s%s", c.arg, code, c.code, c.want, stdout.String(), stderr.String())
		}
		d.mu.Lock()
		if len(d.refused) != 0 {
			t.Errorf("--why %s: connections tried to %v, want none (no other check runs)", c.arg, d.refused)
		}
		d.mu.Unlock()
	}
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--why", "a.test", "--host-probe"}, &stdout, &stderr, Deps{Resolver: res}); code != ExitUsage {
		t.Errorf("--why with --host-probe: exit %d, want %d", code, ExitUsage)
	}
}
