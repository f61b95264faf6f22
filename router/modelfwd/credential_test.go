package modelfwd

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/secret"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/broker"
	"github.com/agentcage/router/rules/modelapi"
	"github.com/agentcage/router/rules/refusal"
)

const (
	testPlaceholder  = "sk-router-placeholder-model-0001"
	otherPlaceholder = "router-placeholder-github-00002"
	testRealKey      = "sk-REAL-KEY-of-the-host-never-in-the-guest"
)

// TestForwardCredentials: a request to the forward a credential is bound to reaches the
// model server with the real value in its placeholder's place; a placeholder bound to another
// place, or in the request target, is a canary: 403, never seen by the server, counted, and
// the real value appears in no log.
func TestForwardCredentials(t *testing.T) {
	e := newEnv(t, 0)
	srv := startModel(t, 2, 0)
	api, err := modelapi.New(modelapi.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	creds := broker.New([]broker.Credential{
		{Name: "model-key", Placeholder: testPlaceholder, Value: secret.NewPassword(testRealKey), Forward: "model"},
		{Name: "github", Placeholder: otherPlaceholder, Value: secret.NewPassword("ghp_REAL"), Forward: "elsewhere"},
	})
	f := Forward{Name: "model", Listen: netip.MustParseAddrPort("127.0.0.1:0"), Connect: netip.MustParseAddrPort(srv.Addr()),
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, API: api, Credentials: creds}
	fl := e.serve(f)
	addr := fl.Addr().String()

	get := func(target, auth string) string {
		raw := "GET " + target + " HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: " + auth + "\r\nConnection: close\r\n\r\n"
		rs := exchange(t, addr, raw, 1)
		if len(rs) != 1 {
			t.Fatalf("GET %s: %d responses", target, len(rs))
		}
		return rs[0].Status
	}
	if st := get("/v1/models", "Bearer "+testPlaceholder); !strings.HasPrefix(st, "200") {
		t.Fatalf("the bound placeholder: %s, want 200", st)
	}
	log := srv.Log()
	if len(log) != 1 || log[0].Auth != "Bearer "+testRealKey {
		t.Fatalf("the server saw %+v, want one request with the real value", log)
	}
	for _, c := range []struct{ target, auth string }{
		{"/v1/models", "Bearer " + otherPlaceholder},            // bound to another place
		{"/v1/models?key=" + testPlaceholder, "Bearer nothing"}, // in the request target
	} {
		if st := get(c.target, c.auth); !strings.HasPrefix(st, "403") {
			t.Errorf("%s with %q: %s, want 403", c.target, c.auth, st)
		}
	}
	if n := len(srv.Log()); n != 1 {
		t.Errorf("the server saw %d requests, want only the allowed one", n)
	}
	if n := e.r.book.Count(refusal.Canary); n != 2 {
		t.Errorf("canaries counted: %d, want 2", n)
	}
	wait.For(t, "the canary's log line", 5*time.Second, func() bool { return strings.Contains(e.logs.String(), "canary") })
	if logs := e.logs.String(); strings.Contains(logs, testRealKey) {
		t.Errorf("logs show the real value:\n%s", logs)
	}
}
