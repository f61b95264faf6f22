package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestExplainSpoofCases: explain decides the spoof cases as the policy and the relay do
// (--sni for the first bytes' name, --resolved for what the router's resolver says), and
// says where a direct dial goes and that a name from the first bytes is not trusted.
func TestExplainSpoofCases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spoof.toml")
	if err := os.WriteFile(path, []byte(policytest.SpoofConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range policytest.SpoofCases() {
		if c.Paths&policytest.Explain == 0 {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			f := c.Flow
			args := []string{"--config", path, "--network", f.Network.String(), "--src", f.Src.String(), "--from-vm",
				"--dst", net.JoinHostPort(f.Dst.String(), strconv.Itoa(int(f.Port))), "--sni", f.Sniffed}
			if f.Resolved != nil {
				var as []string
				for _, a := range f.Resolved {
					as = append(as, a.String())
				}
				if len(as) == 0 {
					as = []string{"none"}
				}
				args = append(args, "--resolved", strings.Join(as, ","))
			}
			var out, errb bytes.Buffer
			if code := explain(append(args, "--json"), &out, &errb, policytest.Env()); code != exitOK {
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
			if o.Verdict.NameUntrusted != c.Untrusted {
				t.Errorf("name_untrusted = %v, want %v", o.Verdict.NameUntrusted, c.Untrusted)
			}
			if c.Action == rules.Direct {
				wantDial := c.Dial.String()
				if got := o.Verdict.Dial; len(got) == 0 || got[0] != wantDial {
					t.Errorf("dial %v, want %s first", got, wantDial)
				}
			}
			// The text says it too.
			out.Reset()
			if code := explain(args, &out, &errb, policytest.Env()); code != exitOK {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if said := strings.Contains(out.String(), "not trusted"); said != c.Untrusted {
				t.Errorf("text says \"not trusted\": %v, want %v:\n%s", said, c.Untrusted, out.String())
			}
		})
	}
	// Without --resolved explain cannot check the name's addresses: it says so, and that the
	// dial goes to the name, not to the address given.
	var out, errb bytes.Buffer
	args := []string{"--config", path, "--src", "10.0.2.15", "--from-vm", "--dst", netip.AddrPortFrom(policytest.SpoofAddr, 22).String(), "--sni", "localhost"}
	if code := explain(args, &out, &errb, policytest.Env()); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"not trusted", "--resolved", "never " + policytest.SpoofAddr.String()} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explain does not say %q:\n%s", want, out.String())
		}
	}
	_ = policy.StepRule
}
