//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/lab"
)

// TestCheckProxy: `router check-proxy` from the host, while the router runs with local
// capture (its probes carry the router's mark and are not captured), against go-socks5 with
// credentials and dante without: both print the exit address and exit 0; a wrong password
// and an upstream that is down exit 1; the password appears in no output.
func TestCheckProxy(t *testing.T) {
	const user, secret = "agent", "e2e-Secret-71"
	s := newLabWith(t, config(lab.GoSocksAddr, ""), lab.Options{SocksUser: user, SocksPassword: secret})
	write := func(name, pass string) string {
		pf := filepath.Join(s.dir, name+".pass")
		if err := os.WriteFile(pf, []byte(pass+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := config(lab.GoSocksAddr, `proxy = "gosocks"`)
		cfg = strings.Replace(cfg, "[proxy.exit]\naddress = \""+lab.GoSocksAddr+"\"", fmt.Sprintf(`[proxy.gosocks]
address = %q
username = %q
password_file = %q

[proxy.dante]
address = %q

[proxy.down]
address = "198.51.100.1:1099"`, lab.GoSocksAddr, user, pf, lab.DanteAddr), 1)
		cfg = strings.ReplaceAll(cfg, "action = \"proxy\"\n", "action = \"proxy\"\nproxy = \"gosocks\"\n")
		path := filepath.Join(s.dir, name+".toml")
		if err := os.WriteFile(path, []byte(cfg+fmt.Sprintf("\n[control]\nsocket = %q\n", s.controlPath())), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good, bad := write("good", secret), write("bad", "wrong-"+secret)
	s.cfg = good
	s.startRouter()

	check := func(cfg, proxy string) (string, int) {
		out, code := run(s.ctx, s.lab.Host(), routerBin, "check-proxy", "--config", cfg, "--proxy", proxy,
			"--echo", "http://"+lab.EchoName+"/", "--timeout", "5s")
		if strings.Contains(out, secret) {
			t.Errorf("check-proxy %s printed the password:\n%s", proxy, out)
		}
		return out, code
	}
	for _, proxy := range []string{"gosocks", "dante"} {
		out, code := check(good, proxy)
		if code != 0 || !strings.Contains(out, "=> ok: exit "+lab.ExitAddr) || !strings.Contains(out, lab.EchoName+" → "+lab.ServiceAddr) {
			t.Errorf("check-proxy %s: exit %d\n%s", proxy, code, out)
		}
		t.Logf("check-proxy %s:\n%s", proxy, out)
	}
	if out, code := check(bad, "gosocks"); code != 1 || !strings.Contains(out, "auth  FAIL the proxy refused the credentials") {
		t.Errorf("check-proxy with a wrong password: exit %d\n%s", code, out)
	}
	if out, code := check(good, "down"); code != 1 || !strings.Contains(out, "reach FAIL") {
		t.Errorf("check-proxy of a proxy that is down: exit %d\n%s", code, out)
	}
	// --json: every proxy of the file, one report each.
	out, code := run(s.ctx, s.lab.Host(), routerBin, "check-proxy", "--config", good, "--json",
		"--echo", "http://"+lab.EchoName+"/", "--timeout", "5s")
	var reps []struct {
		Proxy string `json:"proxy"`
		Exit  string `json:"exit"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &reps); err != nil || code != 1 || len(reps) != 3 ||
		reps[0].Exit != lab.ExitAddr || reps[1].Exit != lab.ExitAddr || reps[2].Error == "" {
		t.Errorf("check-proxy --json: exit %d, %v\n%s", code, err, out)
	}
	// The probes were the router's own: nothing left the host unproxied but them, and the
	// router's log shows no flow of theirs.
	if strings.Contains(s.log(), "check-proxy") {
		t.Errorf("router log mentions the probes:\n%s", s.log())
	}
}
