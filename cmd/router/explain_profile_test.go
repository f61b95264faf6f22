package main

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/agentcage/router/rules/policy/policytest"
)

// TestExplainProfile: explain --profile decides the profile cases as the policy does.
func TestExplainProfile(t *testing.T) {
	path := writeTemp(t, "profiles.toml", policytest.ProfileConfig)
	for _, c := range policytest.ProfileCases() {
		t.Run(c.Name, func(t *testing.T) {
			f := c.Flow
			args := []string{"--config", path, "--os", "linux", "--profile", c.Profile, "--src", f.Src.String(),
				"--name", f.Host, "--dst", net.JoinHostPort(f.Dst.String(), strconv.Itoa(int(f.Port)))}
			if f.App != "" {
				args = append(args, "--app", f.App, "--path", f.AppPath)
			}
			checkVerdict(t, runExplainJSON(t, args, policytest.Env()), c.Case)
		})
	}
	var out, errb bytes.Buffer
	if code := explain([]string{"--config", path, "--os", "linux", "--profile", "nope", "--dst", "198.51.100.7:443"}, &out, &errb, policytest.Env()); code != exitUsage ||
		!strings.Contains(errb.String(), "no such profile (defined: default, build, offline)") {
		t.Errorf("unknown profile: exit %d, %q", code, errb.String())
	}
}
