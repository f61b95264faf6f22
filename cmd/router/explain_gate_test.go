package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentcage/router/rules/policy/policytest"
)

// TestExplainGateCases: explain says which model gate a flow meets, as the policy and the
// data paths decide it (policytest.GateCases), in its JSON and its text.
func TestExplainGateCases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.toml")
	if err := os.WriteFile(path, []byte(policytest.GateConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range policytest.GateCases() {
		if c.Paths&policytest.Explain == 0 {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			f := c.Flow
			args := []string{"--config", path, "--network", f.Network.String(),
				"--src", f.Src.String(), "--dst", net.JoinHostPort(f.Dst.String(), strconv.Itoa(int(f.Port)))}
			if f.App != "" {
				args = append(args, "--app", f.App)
			}
			if f.FromVM {
				args = append(args, "--from-vm")
			}
			var out, errb bytes.Buffer
			if code := explain(append(args, "--json"), &out, &errb, policytest.WallEnv()); code != exitOK {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			var o explainOut
			if err := json.Unmarshal(out.Bytes(), &o); err != nil {
				t.Fatal(err)
			}
			if o.Verdict.Action != c.Action.String() || o.Verdict.Rule != c.Rule {
				t.Errorf("explain: %+v, want %s by %q", o.Verdict, c.Action, c.Rule)
			}
			switch {
			case c.Gate == "" && o.Gate != nil:
				t.Errorf("gate %+v, want none", o.Gate)
			case c.Gate != "" && (o.Gate == nil || o.Gate.Forward != c.Gate || o.Gate.Raw != c.Raw):
				t.Errorf("gate %+v, want forward %q raw %v", o.Gate, c.Gate, c.Raw)
			}
			out.Reset()
			if code := explain(args, &out, &errb, policytest.WallEnv()); code != exitOK {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if got := strings.Contains(out.String(), "gate: forward "+c.Gate+" "); got != (c.Gate != "") {
				t.Errorf("text output %q; want a gate line %v", out.String(), c.Gate != "")
			}
		})
	}
}
