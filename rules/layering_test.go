//go:build !windows

package rules

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNothingOfOurs keeps rules pure: it may use the standard library and
// internal/netaddr (pure address arithmetic, itself standard library only), nothing else.
func TestImportsNothingOfOurs(t *testing.T) {
	const netaddr = "github.com/agentcage/router/internal/netaddr"
	out, err := exec.Command("go", "list", "-deps", ".", netaddr).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		std := !strings.Contains(dep, ".") || strings.HasPrefix(dep, "vendor/")
		if !std && dep != "github.com/agentcage/router/rules" && dep != netaddr {
			t.Errorf("rules depends on %s", dep)
		}
	}
}
