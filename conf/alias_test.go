package conf

import (
	"slices"
	"testing"
)

// TestAppAliases: on Linux an apps entry for pasta or passt also names the process Debian
// runs them as (passt.avx2); on Windows nothing is added.
func TestAppAliases(t *testing.T) {
	src := []byte(`
[proxy.exit]
address = "198.51.100.1:1080"

[capture]
local = true

[[rule]]
name = "nat"
apps = ["pasta", "slirp4netns"]
action = "proxy"
`)
	for _, tc := range []struct {
		goos string
		want []string
	}{
		{"linux", []string{"pasta", "slirp4netns", "pasta.avx2", "passt.avx2"}},
		{"windows", []string{"pasta", "slirp4netns"}},
	} {
		c, err := Parse("alias.toml", src, Options{OS: tc.goos})
		if err != nil {
			t.Fatalf("%s: %v", tc.goos, err)
		}
		var got []string
		for _, a := range c.Rules[0].Apps {
			got = append(got, a.Text)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: apps %q, want %q", tc.goos, got, tc.want)
		}
	}
}
