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
	path := filepath.Join(t.TempDir(), "shared.toml")
	if err := os.WriteFile(path, []byte(policytest.Config), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range policytest.Cases() {
		if c.Flow.Host != "" || c.Step == policy.StepNoName {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			f := c.Flow
			args := []string{"--config", path, "--json", "--network", f.Network.String(),
				"--src", f.Src.String(), "--dst", net.JoinHostPort(f.Dst.String(), strconv.Itoa(int(f.Port)))}
			if f.App != "" {
				args = append(args, "--app", f.App)
			}
			if f.FromVM {
				args = append(args, "--from-vm")
			}
			var out, errb bytes.Buffer
			if code := explain(args, &out, &errb, policytest.Env()); code != exitOK {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			var o explainOut
			if err := json.Unmarshal(out.Bytes(), &o); err != nil {
				t.Fatal(err)
			}
			if o.Verdict.Action != c.Action.String() || o.Verdict.Rule != c.Rule || o.Verdict.Step != c.Step.String() ||
				(c.Action == rules.Proxy && o.Verdict.Proxy != c.Proxy) {
				t.Errorf("explain: %+v, want %s by %q (%s)", o.Verdict, c.Action, c.Rule, c.Step)
			}
			if c.Step != policy.StepRule && o.Verdict.Why == "" {
				t.Error("an implicit step without its reason")
			}
		})
	}
}

// TestExplainWallCases: explain decides the host walls' shared cases as the policy and
// every data path do.
func TestExplainWallCases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "walls.toml")
	if err := os.WriteFile(path, []byte(policytest.WallConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range policytest.WallCases() {
		if c.Paths&policytest.Explain == 0 {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			f := c.Flow
			args := []string{"--config", path, "--json", "--network", f.Network.String(),
				"--src", f.Src.String(), "--dst", net.JoinHostPort(f.Dst.String(), strconv.Itoa(int(f.Port)))}
			if f.App != "" {
				args = append(args, "--app", f.App)
			}
			if f.FromVM {
				args = append(args, "--from-vm")
			}
			var out, errb bytes.Buffer
			if code := explain(args, &out, &errb, policytest.WallEnv()); code != exitOK {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			var o explainOut
			if err := json.Unmarshal(out.Bytes(), &o); err != nil {
				t.Fatal(err)
			}
			if o.Verdict.Action != c.Action.String() || o.Verdict.Rule != c.Rule || o.Verdict.Step != c.Step.String() ||
				(c.Action == rules.Proxy && o.Verdict.Proxy != c.Proxy) {
				t.Errorf("explain: %+v, want %s by %q (%s)", o.Verdict, c.Action, c.Rule, c.Step)
			}
			if o.Verdict.Why == "" && c.Step != policy.StepRule {
				t.Error("an implicit step without its reason")
			}
		})
	}
}
