package lint

import (
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
// do not, on Linux, without local. The configs are under testdata/caught, each with the
// nothing-captured finding it wants, if any.
func TestCagedAppsTakeTraffic(t *testing.T) {
	checkFixtures(t, "caught", "", func(s string) bool { return strings.Contains(s, CheckNothingCaught) })
}

// TestShadowingByFamily: a rule covers only the address families its hosts hold; an IPv6
// range (::/1, which starts at ::, where IPv4-mapped and IPv4-compatible addresses live)
// never shadows an IPv4 rule below it, and an IPv4 range never an IPv6 one. The rules are
// under testdata/family, each with the findings it wants, if any.
func TestShadowingByFamily(t *testing.T) {
	checkFixtures(t, "family", header, func(s string) bool {
		return strings.Contains(s, "unreachable") || strings.Contains(s, "shadow")
	})
}
