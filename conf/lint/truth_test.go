package lint

import (
	"slices"
	"strings"
	"testing"

	"github.com/agentcage/router/conf"
)

func parseOS(t *testing.T, goos, src string) *conf.Config {
	t.Helper()
	cfg, err := conf.Parse("t.toml", []byte(src), conf.Options{SkipSecrets: true, OS: goos})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCagedAppsTakeTraffic: the processes a config cages (a preset's images, a proxy or
// block rule's apps) are captured on every OS whatever [capture] local says (the Linux
// kernel marks their sockets), so such a config takes traffic; a direct rule's apps alone
// do not, on Linux, without local.
func TestCagedAppsTakeTraffic(t *testing.T) {
	const proxy = `
[proxy.exit]
address = "198.51.100.1:1080"
`
	for _, tc := range []struct {
		name, goos, src string
		nothing         bool
	}{
		{"linux qemu preset", "linux", proxy + `
[capture]
hypervisors = ["qemu"]
[[rule]]
name = "vm"
caged = true
action = "proxy"
`, false},
		{"linux proxy rule's apps", "linux", proxy + `
[[rule]]
name = "hv"
apps = ["qemu-system-*"]
action = "proxy"
`, false},
		{"linux block rule's apps", "linux", `
[[rule]]
name = "hv"
apps = ["VBoxHeadless"]
action = "block"
`, false},
		{"linux direct rule's apps only", "linux", `
[[rule]]
name = "tool"
apps = ["curl"]
hosts = ["203.0.113.5"]
action = "direct"
`, true},
		{"windows proxy rule's apps", "windows", proxy + `
[[rule]]
name = "hv"
apps = ["VBoxHeadless.exe"]
action = "proxy"
`, false},
		{"linux nothing", "linux", `
[[rule]]
name = "default"
action = "direct"
`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := Check(parseOS(t, tc.goos, tc.src), Host{OS: tc.goos})
			got := slices.ContainsFunc(fs, func(f Finding) bool { return f.Check == CheckNothingCaught })
			if got != tc.nothing {
				t.Errorf("nothing-captured reported: %v, want %v\n%q", got, tc.nothing, short(fs))
			}
		})
	}
}

// TestShadowingByFamily: a rule covers only the address families its hosts hold; an IPv6
// range (::/1, which starts at ::, where IPv4-mapped and IPv4-compatible addresses live)
// never shadows an IPv4 rule below it, and an IPv4 range never an IPv6 one.
func TestShadowingByFamily(t *testing.T) {
	for _, tc := range []struct {
		name, rules string
		want        []string
	}{
		{"::/1 above an IPv4 rule", `
[[rule]]
name = "v6-low"
hosts = ["::/1"]
action = "block"
[[rule]]
name = "lan"
hosts = ["10.0.0.0/8"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, nil},
		{"::/0 above an IPv4 rule", `
[[rule]]
name = "v6-all"
hosts = ["::/0"]
action = "block"
[[rule]]
name = "lan"
hosts = ["10.0.0.0/8"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, nil},
		{"0.0.0.0/0 above an IPv6 rule", `
[[rule]]
name = "v4-all"
hosts = ["0.0.0.0/0"]
action = "block"
[[rule]]
name = "ula"
hosts = ["fd00::/8"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, nil},
		{"both families above an IPv4 rule", `
[[rule]]
name = "all"
hosts = ["0.0.0.0/0", "::/0"]
action = "block"
[[rule]]
name = "lan"
hosts = ["10.0.0.0/8"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`, []string{"error unreachable lan<all"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := Check(parse(t, header+tc.rules), Host{})
			var got []string
			for _, s := range short(fs) {
				if strings.Contains(s, "unreachable") || strings.Contains(s, "shadow") {
					got = append(got, s)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
