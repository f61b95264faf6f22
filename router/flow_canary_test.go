package router

import (
	"bufio"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/secret"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/broker"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// TestCanaryOnTheDataPath: a caged flow whose first bytes carry a brokered credential's
// placeholder (a plaintext request's header or query, a Host header naming the API, a TLS
// server name) is refused, whatever the rules would have done with it (here: a rule that
// lets everything through direct), and counted as canary; the target never sees it. The
// same flow without the placeholder goes through. On both set-up paths.
func TestCanaryOnTheDataPath(t *testing.T) {
	const ph = "sk-router-placeholder-path-7a7a"
	target := startTarget(t, "")
	creds := broker.New([]broker.Credential{{Name: "api-key", Placeholder: ph, Value: secret.NewPassword("REAL"), Forward: "model"}})
	cfg := &conf.Config{Rules: []rules.Rule{hostRule("open", rules.Direct, "", target.Addr().String())},
		Capture:     conf.Capture{VMNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		DNS:         conf.DNS{Mode: conf.DNSFakeIP, Pool: netip.MustParsePrefix("198.18.0.0/15")},
		Credentials: []conf.Credential{{Name: "api-key", Placeholder: ph, Forward: "model"}}}
	for _, path := range refusePaths {
		for _, c := range []struct {
			name, first string
			canary      bool
		}{
			{"header", "GET / HTTP/1.1\r\nHost: x.example\r\nAuthorization: Bearer " + ph + "\r\n\r\n", true},
			{"query", "GET /log?token=" + ph + " HTTP/1.1\r\nHost: x.example\r\n\r\n", true},
			{"host", "GET / HTTP/1.1\r\nHost: " + ph + ".api.example\r\n\r\n", true},
			{"clean", "GET / HTTP/1.1\r\nHost: x.example\r\n\r\n", false},
		} {
			t.Run(path.name+"/"+c.name, func(t *testing.T) {
				e := newEnv(t, Settings{Decision: policy.New(cfg, policy.Env{}), Credentials: creds}, Options{GoroutineSetup: path.goroutine})
				cl := e.dial(target)
				cl.SetDeadline(time.Now().Add(waitFor))
				if _, err := io.WriteString(cl, c.first); err != nil {
					t.Fatal(err)
				}
				if !c.canary {
					// The target echoes: the request comes back whole.
					got := make([]byte, len(c.first))
					if _, err := io.ReadFull(cl, got); err != nil || string(got) != c.first {
						t.Fatalf("a clean request: read %q, %v; want it echoed", got, err)
					}
					return
				}
				resp, err := http.ReadResponse(bufio.NewReader(cl), nil)
				if err != nil {
					t.Fatalf("read the answer: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "placeholder") {
					t.Errorf("answer %s %q; want the router's 403 naming the placeholder", resp.Status, body)
				}
				wait.For(t, "the canary counted", 5*time.Second, func() bool { return e.r.book.Count(refusal.Canary) == 1 })
				if strings.Contains(e.logs.String(), "REAL") {
					t.Errorf("the value was logged:\n%s", e.logs.String())
				}
			})
		}
	}
}
