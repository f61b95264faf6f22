package router

import (
	"bufio"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
)

// TestFlowLog: the flow log for audits holds a proxied flow with its name and where it came
// from, rule, upstream and bytes, a refused one with its reason, and never the proxy's
// password.
func TestFlowLog(t *testing.T) {
	target := startTarget(t, "hello\n")
	p := startProxy(t, map[string]netip.Addr{"echo.lab.test": target.Addr()}, map[string]string{"agent": "pw-audit-42"})
	fake := netip.MustParseAddr("198.18.0.7")
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{fake: "echo.lab.test"}}
	pol := Settings{
		Decision: mustRules(t, hostRule("no", rules.Block, "", "203.0.113.66"),
			rules.Rule{Name: "all", Action: rules.Proxy, Proxy: "exit"}),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Addr.Port(), Username: "agent", Password: "pw-audit-42"}}},
	}
	path := filepath.Join(t.TempDir(), "flows.jsonl")
	audit := auditlog.New(auditlog.Options{})
	if err := audit.Open(path); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, pol, Options{Names: names, Audit: audit})
	c := e.dial(netip.AddrPortFrom(fake, target.Port()))
	if got := readN(t, c, 6); got != "hello\n" {
		t.Fatalf("banner = %q", got)
	}
	io.WriteString(c, "ping")
	readN(t, c, 4)
	c.Close()
	wantReset(t, e.dial(netip.MustParseAddrPort("203.0.113.66:443")))

	var got []map[string]any
	if !wait.Poll(waitFor, func() bool {
		got = readJSONLines(t, path) // the writer flushes whenever no record waits
		return len(got) >= 2
	}) {
		t.Fatalf("the flow log holds %v", got)
	}
	audit.Close()
	var flow, refused map[string]any
	for _, m := range got {
		switch m["event"] {
		case "flow":
			flow = m
		case "refused":
			refused = m
		}
	}
	if flow == nil || flow["name"] != "echo.lab.test" || flow["name_from"] != "dns" || flow["rule"] != "all" ||
		flow["action"] != "proxy" || flow["upstream"] != "exit" || flow["up"] != 4.0 || flow["down"] != 10.0 ||
		flow["network"] != "tcp" || flow["dst"] != netip.AddrPortFrom(fake, target.Port()).String() {
		t.Errorf("flow record = %v", flow)
	}
	if refused == nil || refused["reason"] != "rule" || refused["rule"] != "no" || refused["action"] != "block" || refused["dst"] != "203.0.113.66:443" {
		t.Errorf("refusal record = %v", refused)
	}
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), "pw-audit-42") {
		t.Errorf("the password is in the flow log:\n%s", raw)
	}
}

func readJSONLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}
