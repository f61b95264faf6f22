package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/agentcage/router/router/broker/tlsca"
)

// TestCA: `router ca` makes the CA in the state directory the first time and prints its
// certificate, the same one afterwards; the key stays in the directory (0600), never printed.
func TestCA(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("STATE_DIRECTORY", dir)
	out, errs, code := run(t, "ca")
	if code != exitOK || !strings.HasPrefix(out, "-----BEGIN CERTIFICATE-----") || strings.Contains(out, "PRIVATE") {
		t.Fatalf("router ca: exit %d, %q, %q", code, out, errs)
	}
	again, _, _ := run(t, "ca")
	if again != out {
		t.Error("a second router ca printed another certificate")
	}
	if st, err := os.Stat(filepath.Join(dir, tlsca.KeyFile)); err != nil || runtime.GOOS != "windows" && st.Mode().Perm() != 0o600 {
		t.Errorf("the key file: %v, %v", st, err)
	}
}
