//go:build !windows

package rules

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNothingOfOurs keeps rules pure: it may use the standard library only.
func TestImportsNothingOfOurs(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, ".") && dep != "github.com/agentcage/router/rules" {
			t.Errorf("rules depends on %s", dep)
		}
	}
}
