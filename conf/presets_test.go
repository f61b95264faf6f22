package conf

import (
	"slices"
	"testing"

	"github.com/agentcage/router/rules"
)

// TestPresetsNameRealBinaries: on Linux each preset cages the executables its hypervisor
// runs on every distribution, as /proc/PID/exe names them: Fedora's and RHEL's QEMU is
// qemu-kvm, Debian's passt runs as passt.avx2, and libvirt's session instance (GNOME
// Boxes) and quickemu run QEMU with user networking.
func TestPresetsNameRealBinaries(t *testing.T) {
	for _, tc := range []struct {
		preset string
		runs   []string // executables' file names
	}{
		{"qemu", []string{"qemu-system-x86_64", "qemu-system-aarch64", "qemu-kvm", "passt", "passt.avx2", "pasta", "pasta.avx2", "slirp4netns"}},
		{"libvirt", []string{"qemu-system-x86_64", "qemu-kvm", "passt", "passt.avx2"}},
		{"virtualbox", []string{"VBoxHeadless", "VirtualBoxVM", "VBoxNetNAT"}},
		{"vmware", []string{"vmware-vmx", "vmnet-natd"}},
	} {
		p, why := LookupPreset(tc.preset, "linux")
		if why != "" {
			t.Fatalf("%s: %s", tc.preset, why)
		}
		r := rules.Rule{}
		for _, a := range p.Apps {
			r.Apps = append(r.Apps, rules.MustApp(a))
		}
		for _, exe := range tc.runs {
			if !r.MatchApp(&rules.Query{Owner: rules.Owner{App: exe, AppPath: "/usr/bin/" + exe}}) {
				t.Errorf("preset %s (apps %q) does not cage %s", tc.preset, p.Apps, exe)
			}
		}
		if slices.ContainsFunc(p.Apps, func(a string) bool { return a == "*" }) {
			t.Errorf("preset %s cages everything", tc.preset)
		}
	}
	// On Windows, the names Windows runs.
	p, _ := LookupPreset("qemu", "windows")
	if !slices.Equal(p.Apps, []string{"qemu-system-*.exe"}) {
		t.Errorf("qemu on windows: %q", p.Apps)
	}
}
