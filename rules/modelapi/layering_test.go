//go:build !windows

package modelapi

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNothingOfOurs keeps modelapi pure: the standard library only.
func TestImportsNothingOfOurs(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		std := !strings.Contains(dep, ".") || strings.HasPrefix(dep, "vendor/")
		if !std && dep != "github.com/agentcage/router/rules/modelapi" {
			t.Errorf("modelapi depends on %s", dep)
		}
	}
}
