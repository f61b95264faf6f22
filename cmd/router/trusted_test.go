package main

import (
	_ "embed"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentcage/router/conf"
)

// trustedConfig names a file of each kind the service must trust; CA_FILE stands for the
// CA file's path.
//
//go:embed testdata/trusted.toml
var trustedConfig string

// TestTrustedFiles: the files the Windows service refuses when non-administrators may
// change them include the rules' hosts files, the proxies' CA files and the approved
// rules file (when the config asks and it exists), besides the config and password files.
func TestTrustedFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hosts := write("registries.txt", "registry.npmjs.org\n")
	ca := write("ca.pem", string(testCAPEM(t)))
	approved := write("approved.toml", "")
	cfgPath := write("router.toml", strings.ReplaceAll(trustedConfig, "CA_FILE", filepath.ToSlash(ca)))
	cfg, err := conf.Load(cfgPath, conf.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	got := trustedFiles(cfg)
	for _, want := range []string{cfgPath, hosts, approved} {
		if !slices.Contains(got, want) {
			t.Errorf("trustedFiles = %q, lacks %s", got, want)
		}
	}
	if !slices.ContainsFunc(got, func(p string) bool { return filepath.Base(p) == "ca.pem" }) {
		t.Errorf("trustedFiles = %q, lacks the CA file", got)
	}
}
