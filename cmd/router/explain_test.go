package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestExplainSharedCases: explain decides the shared flows as the policy, the relay and the
// Windows engine do. Fake-IP cases are left out: only the running daemon names a pool
// address (explain asks it over the control channel).
func TestExplainSharedCases(t *testing.T) {
	path := writeTemp(t, "shared.toml", policytest.Config)
	for _, c := range policytest.Cases() {
		if c.Flow.Host != "" || c.Step == policy.StepNoName {
			continue
		}
		t.Run(c.Name, func(t *testing.T) { checkExplained(t, path, c, policytest.Env()) })
	}
}

// TestExplainWallCases: explain decides the host walls' shared cases as the policy and
// every data path do.
func TestExplainWallCases(t *testing.T) {
	path := writeTemp(t, "walls.toml", policytest.WallConfig)
	for _, c := range policytest.WallCases() {
		if c.Paths&policytest.Explain == 0 {
			continue
		}
		t.Run(c.Name, func(t *testing.T) { checkExplained(t, path, c.Case, policytest.WallEnv()) })
	}
}

// checkExplained fails t unless explain, with the config at path and under env, decides c's
// flow as c says, and gives the reason of an implicit step.
func checkExplained(t *testing.T, path string, c policytest.Case, env policy.Env) {
	t.Helper()
	o := runExplainJSON(t, append([]string{"--config", path}, flowArgs(c.Flow)...), env)
	checkVerdict(t, o, c)
	if c.Step != policy.StepRule && o.Verdict.Why == "" {
		t.Error("an implicit step without its reason")
	}
}

// writeTemp writes text to a file name in a new temporary directory of t and returns its
// path; a failure ends the test.
func writeTemp(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// flowArgs are explain's flags for f's network, source, destination address and port, app
// and whether it comes from a VM.
func flowArgs(f policy.Flow) []string {
	args := []string{"--network", f.Network.String(),
		"--src", f.Src.String(), "--dst", net.JoinHostPort(f.Dst.String(), strconv.Itoa(int(f.Port)))}
	if f.App != "" {
		args = append(args, "--app", f.App)
	}
	if f.FromVM {
		args = append(args, "--from-vm")
	}
	return args
}

// runExplainText runs explain with args under env and returns what it printed; an exit other
// than exitOK ends the test.
func runExplainText(t *testing.T, args []string, env policy.Env) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := explain(args, &out, &errb, env); code != exitOK {
		t.Fatalf("explain %q: exit %d: %s", args, code, errb.String())
	}
	return out.String()
}

// runExplainJSON runs explain with args and --json under env and returns its answer; an exit
// other than exitOK, or an answer that does not decode, ends the test.
func runExplainJSON(t *testing.T, args []string, env policy.Env) explainOut {
	t.Helper()
	var o explainOut
	if err := json.Unmarshal([]byte(runExplainText(t, append(args[:len(args):len(args)], "--json"), env)), &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// checkVerdict fails t unless o's verdict is c's: its action, rule and step, and its proxy
// for a proxy action.
func checkVerdict(t *testing.T, o explainOut, c policytest.Case) {
	t.Helper()
	if o.Verdict.Action != c.Action.String() || o.Verdict.Rule != c.Rule || o.Verdict.Step != c.Step.String() ||
		(c.Action == rules.Proxy && o.Verdict.Proxy != c.Proxy) {
		t.Errorf("explain: %+v, want %s by %q (%s)", o.Verdict, c.Action, c.Rule, c.Step)
	}
}
