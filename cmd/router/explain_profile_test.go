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

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestExplainProfile: explain --profile decides the profile cases as the policy does.
func TestExplainProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profiles.toml")
	if err := os.WriteFile(path, []byte(policytest.ProfileConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range policytest.ProfileCases() {
		t.Run(c.Name, func(t *testing.T) {
			f := c.Flow
			args := []string{"--config", path, "--json", "--os", "linux", "--profile", c.Profile, "--src", f.Src.String(),
				"--name", f.Host, "--dst", net.JoinHostPort(f.Dst.String(), strconv.Itoa(int(f.Port)))}
			if f.App != "" {
				args = append(args, "--app", f.App, "--path", f.AppPath)
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
		})
	}
	var out, errb bytes.Buffer
	if code := explain([]string{"--config", path, "--os", "linux", "--profile", "nope", "--dst", "198.51.100.7:443"}, &out, &errb, policytest.Env()); code != exitUsage ||
		!strings.Contains(errb.String(), "no such profile (defined: default, build, offline)") {
		t.Errorf("unknown profile: exit %d, %q", code, errb.String())
	}
}
