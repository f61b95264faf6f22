package main

import (
	_ "embed"
	"testing"

	"github.com/agentcage/router/rules/policy"
)

// cagedConfig sends the caged apps' flows through a proxy and the rest direct; a test puts
// its [capture] table before it.
//
//go:embed testdata/caged.toml
var cagedConfig string

// TestExplainPresetBinaries: explain cages the executables each distribution runs a
// hypervisor as (the file name /proc/PID/exe shows), as the kernel does: RHEL's qemu-kvm
// and GNOME Boxes's QEMU under the libvirt preset too; a binary that is no hypervisor's is
// not caged.
func TestExplainPresetBinaries(t *testing.T) {
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
		cfg := writeTemp(t, "c.toml", "[capture]\nhypervisors = [\""+tc.preset+"\"]\n"+cagedConfig)
		o := runExplainJSON(t, []string{"--config", cfg, "--os", "linux", "--app", tc.app, "--dst", "203.0.113.7:443"}, policy.Env{})
		if o.Caged != tc.caged {
			t.Errorf("preset %s, app %s: caged %v (%+v), want %v", tc.preset, tc.app, o.Caged, o.Verdict, tc.caged)
		}
	}
}
