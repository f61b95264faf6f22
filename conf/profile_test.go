package conf

import (
	_ "embed"
	"fmt"
	"testing"
)

// profilesTOML has top-level rules and two profiles, offline and build.
//
//go:embed testdata/profiles.toml
var profilesTOML []byte

// TestProfiles: each profile's rules and their lines in testdata/profiles.toml; the default
// profile is the top-level rules.
func TestProfiles(t *testing.T) {
	cfg, err := Parse("profiles.toml", profilesTOML, Options{OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(cfg.ProfileNames()), "[default build offline]"; got != want {
		t.Errorf("profile names = %s, want %s", got, want)
	}
	for _, tc := range []struct {
		name  string
		rules string
		lines string
	}{
		{"default", "registries/proxy/exit", "[4]"},
		{"build", "registries/proxy/exit rest/block/", "[17 22]"},
		{"offline", "model/proxy/exit", "[11]"},
	} {
		p, ok := cfg.Profile(tc.name)
		if !ok {
			t.Fatalf("profile %q not found", tc.name)
		}
		got := ""
		for i, r := range p.Rules {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("%s/%s/%s", r.Name, r.Action, r.Proxy)
		}
		if got != tc.rules {
			t.Errorf("profile %s: rules = %s, want %s", tc.name, got, tc.rules)
		}
		if got := fmt.Sprint(p.RuleLines); got != tc.lines {
			t.Errorf("profile %s: rule lines = %s, want %s", tc.name, got, tc.lines)
		}
	}
	if _, ok := cfg.Profile("nope"); ok {
		t.Error("an unknown profile was found")
	}
}
