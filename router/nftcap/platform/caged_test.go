package platform

import (
	"slices"
	"testing"

	"github.com/agentcage/router/conf"
)

// TestCagedNames: the kernel's names are the presets' apps and those of the proxy and
// block rules, each also in lower case, never a path or a direct rule's.
func TestCagedNames(t *testing.T) {
	cfg, err := conf.Parse("caged.toml", []byte(`
[proxy.exit]
address = "198.51.100.1:1080"

[capture]
hypervisors = ["qemu"]

[[rule]]
name = "vbox"
apps = ["VBoxHeadless", "/opt/x/bin/nat"]
action = "proxy"

[[rule]]
name = "browser"
apps = ["firefox"]
action = "direct"
`), conf.Options{OS: "linux"})
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
