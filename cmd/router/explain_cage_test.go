package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentcage/router/rules/policy"
)

// TestExplainPresetBinaries: explain cages the executables each distribution runs a
// hypervisor as (the file name /proc/PID/exe shows), as the kernel does: RHEL's qemu-kvm
// and GNOME Boxes's QEMU under the libvirt preset too; a binary that is no hypervisor's is
// not caged.
func TestExplainPresetBinaries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "presets.toml")
	if err := os.WriteFile(path, []byte(`
[proxy.exit]
address = "198.51.100.1:1080"

[[rule]]
name = "caged"
caged = true
action = "proxy"
proxy = "exit"

[[rule]]
name = "default"
action = "direct"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		preset, app string
		caged       bool
	}{
		{"qemu", "qemu-kvm", true},
		{"qemu", "qemu-system-x86_64", true},
		{"qemu", "passt.avx2", true},
		{"libvirt", "qemu-kvm", true},
		{"libvirt", "qemu-system-aarch64", true},
		{"qemu", "qemu-img", false},
		{"qemu", "VM", false}, // the name QEMU's process= gives it is not what it runs
	} {
		cfg := filepath.Join(t.TempDir(), "c.toml")
		base, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, append([]byte("[capture]\nhypervisors = [\""+tc.preset+"\"]\n"), base...), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		args := []string{"--config", cfg, "--os", "linux", "--json", "--app", tc.app, "--dst", "203.0.113.7:443"}
		if code := explain(args, &stdout, &stderr, policy.Env{}); code != exitOK {
			t.Fatalf("explain %q: exit %d: %s", args, code, stderr.String())
		}
		var o explainOut
		if err := json.Unmarshal(stdout.Bytes(), &o); err != nil {
			t.Fatal(err)
		}
		if o.Caged != tc.caged {
			t.Errorf("preset %s, app %s: caged %v (%+v), want %v", tc.preset, tc.app, o.Caged, o.Verdict, tc.caged)
		}
	}
}
