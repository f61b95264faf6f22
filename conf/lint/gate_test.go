package lint

import (
	"slices"
	"strings"
	"testing"
)

// TestUngatedLoopback: a direct rule that opens the host's loopback to caged traffic at a
// port no forward connects to is an error; at a forward's connect port, a gate serves it.
func TestUngatedLoopback(t *testing.T) {
	src := `
[capture]
hypervisors = ["qemu"]

[[forward]]
name = "model"
listen = "127.0.0.1:11435"
connect = "127.0.0.1:11434"
allow = ["127.0.0.1/32"]

[[rule]]
name = "gated"
hosts = ["127.0.0.1", "::1", "localhost"]
ports = [11434]
action = "direct"

[[rule]]
name = "raw-model"
hosts = ["127.0.0.1"]
ports = [47831]
action = "direct"

[[rule]]
name = "by-name"
hosts = ["localhost"]
ports = ["8000-8010"]
action = "direct"

[[rule]]
name = "not-loopback"
hosts = ["10.0.2.2"]
ports = [8080]
action = "direct"

[[rule]]
name = "every-address"
hosts = ["0.0.0.0/0"]
ports = [9000]
action = "direct"

[[rule]]
name = "default"
action = "direct"
`
	var got []string
	for _, f := range short(Check(parseOS(t, "linux", src), Host{OS: "linux"})) {
		if strings.Contains(f, CheckUngatedModel) {
			got = append(got, f)
		}
	}
	if want := []string{"error ungated-loopback raw-model", "error ungated-loopback by-name"}; !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// TestCagedAppsCaptured: on Linux a caged app's sockets are captured whatever local says
// (a user-space NAT preset, or a proxy rule naming the NAT), so such a config captures
// something; a direct rule's apps are not caged.
func TestCagedAppsCaptured(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      bool
	}{
		{"qemu preset", "[capture]\nhypervisors = [\"qemu\"]\n[[rule]]\nname = \"default\"\naction = \"direct\"\n", false},
		{"proxy rule by app", "[proxy.exit]\naddress = \"192.0.2.1:1080\"\n[[rule]]\nname = \"pasta\"\napps = [\"pasta\"]\naction = \"proxy\"\n[[rule]]\nname = \"default\"\naction = \"direct\"\n", false},
		{"direct rule by app", "[[rule]]\nname = \"app\"\napps = [\"curl\"]\naction = \"direct\"\n[[rule]]\nname = \"default\"\naction = \"direct\"\n", true},
	} {
		got := slices.ContainsFunc(Check(parseOS(t, "linux", tc.src), Host{OS: "linux"}), func(f Finding) bool { return f.Check == CheckNothingCaught })
		if got != tc.want {
			t.Errorf("%s: nothing-captured %v, want %v", tc.name, got, tc.want)
		}
	}
}
