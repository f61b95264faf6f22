package lint

import (
	"strconv"
	"strings"
	"testing"
)

// TestProfiles: a profile's rules are linted as a list of their own, findings named by the
// profile and at its lines (of testdata/profiles.toml); a profile without a catch-all is no
// finding.
func TestProfiles(t *testing.T) {
	cfg := parse(t, profilesConfig)
	var got []string
	for _, f := range Check(cfg, Host{OS: "linux"}) {
		if strings.HasPrefix(f.Message, "profile build: ") {
			got = append(got, f.Check+"@"+f.Rule+":"+strconv.Itoa(f.Line))
		}
	}
	if want := "unreachable@npm:15 local-via-proxy@local:21"; strings.Join(got, " ") != want {
		t.Errorf("profile findings %q, want %q", strings.Join(got, " "), want)
	}
}
