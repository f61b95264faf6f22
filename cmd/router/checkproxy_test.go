package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcage/router/router/upstream/socks5/socks5test"
)

// TestCheckProxy runs check-proxy against a go-socks5 server with credentials on loopback
// and an IP-echo server behind it: the right password passes, a wrong one fails with exit
// 1, and neither shows the password.
func TestCheckProxy(t *testing.T) {
	const secret = "cli-Secret-93"
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, `{"ip": "198.51.100.23"}`)
	}))
	t.Cleanup(echo.Close)
	proxy := socks5test.Start(t, socks5test.Options{Credentials: map[string]string{"agent": secret}})

	dir := t.TempDir()
	write := func(name, pass string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p+".pass", []byte(pass+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`
[proxy.exit]
address = %q
username = "agent"
password_file = %q

[[rule]]
name = "default"
action = "proxy"
`, proxy.Addr.String(), p+".pass")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, bad := write("good.toml", secret), write("bad.toml", "wrong-"+secret)

	out, errOut, code := run(t, "check-proxy", "--config", good, "--echo", echo.URL+"/", "--timeout", "5s")
	if code != exitOK || !strings.Contains(out, "=> ok: exit 198.51.100.23") || !strings.Contains(out, `credentials of "agent" accepted`) {
		t.Errorf("good: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, secret) {
		t.Errorf("good: the output shows the password:\n%s%s", out, errOut)
	}

	out, errOut, code = run(t, "check-proxy", "--config", bad, "--echo", echo.URL+"/", "--timeout", "5s", "--json")
	var reps []map[string]any
	if err := json.Unmarshal([]byte(out), &reps); err != nil || code != exitFindings || len(reps) != 1 ||
		!strings.HasPrefix(fmt.Sprint(reps[0]["error"]), "auth: the proxy refused the credentials") {
		t.Errorf("bad: exit %d, err %v, stdout:\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	if strings.Contains(out+errOut, secret) {
		t.Errorf("bad: the output shows the password:\n%s%s", out, errOut)
	}

	if _, _, code := run(t, "check-proxy", "--config", good, "--proxy", "nosuch"); code != exitUsage {
		t.Errorf("unknown proxy: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := run(t, "check-proxy"); code != exitUsage {
		t.Errorf("no config: exit %d, want %d", code, exitUsage)
	}
}
