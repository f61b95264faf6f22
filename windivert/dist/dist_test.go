//go:build !windows

package dist_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/dist"
)

// TestModuleCarriesPinnedFiles checks, on Linux and macOS (under Wine there is no go
// command; dist_windows_amd64_test.go checks the embedded bytes there), that the module version pinned in go.mod
// carries the files with the pinned hashes (the windows/amd64 build embeds exactly these).
func TestModuleCarriesPinnedFiles(t *testing.T) {
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	out, err := exec.Command(gobin, "mod", "download", "-json", dist.ModulePath+"@"+dist.ModuleVersion).Output()
	if err != nil {
		t.Fatalf("go mod download %s@%s: %v (needs the go command and the module proxy)", dist.ModulePath, dist.ModuleVersion, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download: %s %v", out, err)
	}
	dll, err := os.ReadFile(filepath.Join(m.Dir, dist.ModuleDLLPath))
	if err != nil {
		t.Fatal(err)
	}
	sys, err := os.ReadFile(filepath.Join(m.Dir, dist.ModuleSysPath))
	if err != nil {
		t.Fatal(err)
	}
	if err := (windivert.Files{DLL: dll, Sys: sys}).Verify(); err != nil {
		t.Errorf("module files: %v", err)
	}
	if _, err := os.Stat(filepath.Join(m.Dir, "LICENCE")); err != nil {
		t.Errorf("module licence file: %v", err)
	}
}
