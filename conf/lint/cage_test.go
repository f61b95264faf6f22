package lint

import (
	"slices"
	"testing"

	"github.com/agentcage/router/conf"
)

func TestCage(t *testing.T) {
	const proxy = "[proxy.exit]\naddress = \"198.51.100.1:1080\"\n"
	for _, tc := range []struct {
		name, os, text string
		want           []string
	}{
		{"a VM rule, a host catch-all: clean", "linux", proxy + `
[capture]
vm_networks = ["10.0.2.0/24"]
[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, nil},
		{"a model rule by name is no way out", "windows", proxy + `
[capture]
hypervisors = ["qemu"]
[[rule]]
name = "model"
hosts = ["localhost", "127.0.0.1"]
ports = [47831]
action = "direct"
[[rule]]
name = "default"
action = "direct"
`, []string{"note preset qemu", "warning caged-no-way qemu-system-*.exe"}},
		{"a sources rule leaves the interface's other addresses without a way out", "linux", proxy + `
[capture]
vm_networks = ["10.0.2.0/24"]
vm_interfaces = ["vmnet"]
[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, []string{"warning caged-no-way vmnet"}},
		{"the VM rule removed: no way out", "linux", proxy + `
[capture]
vm_networks = ["10.0.2.0/24"]
[[rule]]
name = "model"
hosts = ["10.0.2.2"]
ports = [47831]
action = "direct"
[[rule]]
name = "other"
hosts = ["203.0.113.0/24"]
action = "block"
[[rule]]
name = "default"
action = "direct"
`, []string{"warning caged-no-way 10.0.2.0/24"}},
		{"a direct rule for the VM without destinations: the leak", "linux", proxy + `
[capture]
vm_networks = ["10.0.2.0/24"]
[[rule]]
name = "vm-direct"
sources = ["10.0.2.0/24"]
action = "direct"
[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"
`, []string{"error direct-caged vm-direct", "error unreachable vm<vm-direct", "warning no-catch-all "}},
		{"a direct rule for caged = true", "linux", proxy + `
[capture]
vm_networks = ["10.0.2.0/24"]
[[rule]]
name = "cage"
caged = true
action = "direct"
`, []string{"error direct-caged cage", "warning no-catch-all "}},
		{"a direct rule for a caged app", "windows", proxy + `
[capture]
local = true
[[rule]]
name = "vbox-direct"
apps = ["VBoxHeadless.exe"]
action = "direct"
[[rule]]
name = "vbox"
apps = ["VBox*.exe"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, []string{"error direct-caged vbox-direct", "warning partly-shadowed vbox<vbox-direct"}},
		{"the model only, by destination: fine", "windows", proxy + `
[capture]
local = true
[[rule]]
name = "model"
apps = ["VBoxHeadless.exe"]
hosts = ["127.0.0.1"]
ports = [47831]
action = "direct"
[[rule]]
name = "vbox"
apps = ["VBoxHeadless.exe"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, nil},
		{"presets with caged = true: notes only", "linux", proxy + `
[capture]
hypervisors = ["qemu", "libvirt"]
local = true
[[rule]]
name = "cage"
caged = true
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, []string{"note preset qemu", "note preset libvirt"}},
		{"a user-space NAT preset without local capture, and no way out", "linux", proxy + `
[capture]
hypervisors = ["virtualbox"]
[[rule]]
name = "default"
action = "direct"
`, []string{"note preset virtualbox", "warning caged-no-way 192.168.56.0/24",
			"warning caged-no-way VirtualBoxVM", "warning caged-no-way VBoxHeadless", "warning caged-no-way VBoxNetNAT", "warning caged-no-way vboxnet*"}},
		{"Windows names on Linux", "linux", proxy + `
[capture]
local = true
[[rule]]
name = "hv"
apps = ["VirtualBoxVM.exe", "qemu-system-*"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, []string{"warning foreign-app hv"}},
		{"a bare name on Windows", "windows", proxy + `
[capture]
local = true
[[rule]]
name = "hv"
apps = ["VirtualBoxVM", "qemu-system-*"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, []string{"warning foreign-app hv"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := conf.Parse("t.toml", []byte(tc.text), conf.Options{SkipSecrets: true, OS: tc.os})
			if err != nil {
				t.Fatal(err)
			}
			got := short(Check(cfg, Host{OS: tc.os}))
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("got  %q\nwant %q", got, want)
			}
		})
	}
}
