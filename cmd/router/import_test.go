package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gosocks5 "github.com/things-go/go-socks5"

	"github.com/agentcage/router/router/control"
)

// TestImportProxifier: the trap profile imports to a config whose lint reports the trap
// (exit 1), the fixed one to a clean config (exit 0) that `router lint` accepts; the notes
// name the profile's lines; the password is in no output; an existing -o file is kept.
func TestImportProxifier(t *testing.T) {
	dir := t.TempDir()
	trap := filepath.Join(dir, "trap.toml")
	out, errOut, code := run(t, "import", "proxifier", "../../testdata/proxifier/windows-trap.ppx", "-o", trap)
	if code != exitFindings || !strings.Contains(out, `error: rule #2 "Model direct" is shadowed for local destinations: rule #1 "Hypervisor"`) ||
		!strings.Contains(out, "windows-trap.ppx:34: changed: rule \"Default\"") {
		t.Errorf("trap: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if _, _, code := run(t, "lint", "--config", trap, "--os", "windows"); code != exitFindings {
		t.Errorf("lint of the imported trap: exit %d, want %d", code, exitFindings)
	}
	fixed := filepath.Join(dir, "fixed.toml")
	out, errOut, code = run(t, "import", "proxifier", "-o", fixed, "../../testdata/proxifier/windows-fixed.ppx")
	if code != exitOK || !strings.Contains(out, "fixed.toml: 0 errors, 0 warnings") || strings.Contains(out+errOut, "c2VjcmV0") {
		t.Errorf("fixed: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if out, _, code := run(t, "lint", "--config", fixed, "--os", "windows"); code != exitOK {
		t.Errorf("lint of the imported profile: exit %d:\n%s", code, out)
	}
	if _, errOut, code := run(t, "import", "proxifier", "../../testdata/proxifier/windows-fixed.ppx", "-o", fixed); code != exitUsage || !strings.Contains(errOut, "exists") {
		t.Errorf("existing -o file: exit %d, stderr %s", code, errOut)
	}
	// Without -o: the config on stdout, the rest on stderr.
	out, errOut, code = run(t, "import", "proxifier", "../../testdata/proxifier/windows-fixed.ppx")
	if code != exitOK || !strings.HasPrefix(out, "# Imported from windows-fixed.ppx") || !strings.Contains(errOut, "lint of router.toml:") {
		t.Errorf("stdout: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if _, errOut, code := run(t, "import", "proxifier", "../../testdata/proxifier/bad/entity.ppx"); code != exitUsage || !strings.Contains(errOut, "entity.ppx:2: the profile holds a DTD") {
		t.Errorf("bad profile: exit %d, stderr %s", code, errOut)
	}
	if _, _, code := run(t, "import", "clash", "x.yaml"); code != exitUsage {
		t.Errorf("unknown format: exit %d", code)
	}
}

// TestCheckProxyChain: check-proxy of a chained proxy reports each hop, the first alone and
// the last reached through it.
func TestCheckProxyChain(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, `{"ip": "198.51.100.24"}`)
	}))
	t.Cleanup(echo.Close)
	socks := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := gosocks5.NewServer(gosocks5.WithDial(func(ctx context.Context, network, addr string) (net.Conn, error) {
			if ap, err := netip.ParseAddrPort(addr); err != nil || !ap.Addr().IsLoopback() {
				return nil, fmt.Errorf("test dials loopback only, not %q", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}))
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		t.Cleanup(func() { ln.Close(); <-done })
		return ln.Addr().String()
	}
	entry, exit := socks(), socks()
	cfg := filepath.Join(t.TempDir(), "chain.toml")
	body := fmt.Sprintf(`
[proxy.entry]
address = %q

[proxy.exit]
address = %q
via = "entry"

[dns]
proxy = "exit"

[[rule]]
name = "default"
action = "proxy"
proxy = "exit"
`, entry, exit)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "check-proxy", "--config", cfg, "--proxy", "exit", "--echo", echo.URL+"/", "--timeout", "5s", "--json")
	var reps []struct {
		Proxy string
		Error string
		Steps []struct{ Name, Detail string }
	}
	if err := json.Unmarshal([]byte(out), &reps); err != nil || code != exitOK || len(reps) != 2 {
		t.Fatalf("exit %d, err %v, stdout:\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	if reps[0].Proxy != "entry" || reps[1].Proxy != "exit" || !strings.Contains(reps[1].Steps[0].Detail, "through entry") {
		t.Errorf("reports: %+v", reps)
	}
}

// TestRuleActionShowsDisabled: status and watch print a disabled rule's action as such.
func TestRuleActionShowsDisabled(t *testing.T) {
	if got := ruleAction(control.RuleStat{Action: "proxy", Proxy: "exit", Disabled: true}); got != "disabled (proxy via exit)" {
		t.Errorf("got %q", got)
	}
	if got := ruleAction(control.RuleStat{Action: "direct"}); got != "direct" {
		t.Errorf("got %q", got)
	}
}

// logSteps is a progress line that logs its steps, and the writes that follow, in order.
type logSteps struct{ log *[]string }

func (s logSteps) Step(step string) { *s.log = append(*s.log, "step: "+step) }
func (s logSteps) Done()            { *s.log = append(*s.log, "done") }

// logWriter logs that it was written to.
type logWriter struct {
	name string
	log  *[]string
}

func (w logWriter) Write(p []byte) (int, error) {
	*w.log = append(*w.log, "write: "+w.name)
	return len(p), nil
}

// TestImportProgress: the import names its steps on the progress line and clears it before
// it writes anything, the config or an error; to a stderr that is not a terminal (a test's
// buffer) nothing of the line is written.
func TestImportProgress(t *testing.T) {
	for _, c := range []struct {
		args  []string
		steps []string
	}{
		{[]string{"proxifier", "../../testdata/proxifier/windows-fixed.ppx"},
			[]string{"reading ../../testdata/proxifier/windows-fixed.ppx", "parsing ../../testdata/proxifier/windows-fixed.ppx (1 KB)", "converting 4 rules", "loading the config (1 KB)", "linting 4 rules"}},
		{[]string{"proxifier", filepath.Join(t.TempDir(), "missing.ppx")}, nil},
	} {
		var log []string
		start := func(first string) steps {
			log = append(log, "start: "+first)
			return logSteps{&log}
		}
		importProfile(c.args, logWriter{"stdout", &log}, logWriter{"stderr", &log}, start)
		firstWrite := slices.IndexFunc(log, func(s string) bool { return strings.HasPrefix(s, "write: ") })
		if firstWrite < 1 || log[firstWrite-1] != "done" {
			t.Errorf("%v: the line is not cleared before the first write: %q", c.args, log)
			continue
		}
		var got []string
		for _, s := range log[:firstWrite] {
			if s, ok := strings.CutPrefix(s, "step: "); ok {
				got = append(got, s)
			}
		}
		if c.steps != nil && !slices.Equal(append([]string{strings.TrimPrefix(log[0], "start: ")}, got...), c.steps) {
			t.Errorf("%v: steps %q, want %q", c.args, got, c.steps)
		}
	}
	_, errOut, _ := run(t, "import", "proxifier", "../../testdata/proxifier/windows-fixed.ppx")
	if strings.ContainsAny(errOut, "\r\x1b") {
		t.Errorf("a progress line on a stderr that is not a terminal: %q", errOut)
	}
}
