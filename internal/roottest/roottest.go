// Package roottest is the opt-in gate of the tests that need root and network namespaces:
// the end-to-end tests (e2e), the namespace lab (internal/lab) and the nftables capture
// (nftcap). They run only when the environment variable ROUTER_E2E is 1, which scripts/test
// sets, so that `go test ./...` run by any user is green. Without it they skip with a message
// saying how to run them; with it, a test whose setup cannot run (not root, a tool missing)
// fails, it never skips.
package roottest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Env is the variable that opts in: "1" runs the privileged tests, "" or "0" skips them.
const Env = "ROUTER_E2E"

// howTo is the skip message.
const howTo = "needs root and network namespaces: run with " + Env + "=1 as root (sudo scripts/test sets it)"

// Enabled reports whether Env asks for the privileged tests. Any value other than "", "0"
// and "1" is an error, so that a typo never turns the tests off silently.
func Enabled() (bool, error) {
	switch v := os.Getenv(Env); v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("%s=%q: want 1 (run the root tests) or 0", Env, v)
	}
}

// Check returns nil when this process is root and every tool is on PATH, or an error that
// names what is missing.
func Check(tools ...string) error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, fmt.Errorf("%s=1 but not root (uid %d): these tests build network namespaces and nftables tables", Env, os.Geteuid()))
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			errs = append(errs, fmt.Errorf("%s=1 but %s is missing: %w", Env, tool, err))
		}
	}
	return errors.Join(errs...)
}

// Require gates a privileged test. Unless Env is 1 it skips t, saying how to run it; with
// Env=1 it fails t now when Check fails, so a test that cannot set itself up never passes
// unseen.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	on, err := Enabled()
	if err != nil {
		t.Fatal(err)
	}
	if !on {
		t.Skip(howTo)
	}
	if err := Check(tools...); err != nil {
		t.Fatal(err)
	}
}
