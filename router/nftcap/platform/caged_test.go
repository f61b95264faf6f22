package platform

import (
	_ "embed"
	"slices"
	"testing"

	"github.com/agentcage/router/conf"
)

// cagedConfig names caged apps by a preset (qemu) and by a proxy rule (a name and a path),
// and one app by a direct rule.
//
//go:embed testdata/caged.toml
var cagedConfig string

// TestCagedNames: the kernel's names are the presets' apps and those of the proxy and
// block rules, each also in lower case, never a path or a direct rule's.
func TestCagedNames(t *testing.T) {
	cfg, err := conf.Parse("caged.toml", []byte(cagedConfig), conf.Options{OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	got := CagedNames(cfg)
	for _, want := range []string{"qemu-system-*", "passt", "passt.avx2", "pasta", "pasta.avx2", "slirp4netns", "VBoxHeadless", "vboxheadless"} {
		if !slices.Contains(got, want) {
			t.Errorf("CagedNames lacks %q: %q", want, got)
		}
	}
	for _, not := range []string{"/opt/x/bin/nat", "firefox"} {
		if slices.Contains(got, not) {
			t.Errorf("CagedNames has %q: %q", not, got)
		}
	}
}
