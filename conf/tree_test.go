package conf

import (
	"strings"
	"testing"
)

// TestDecoderHelpersRefuse: a secret given both as a variable and as a file, a value outside
// a key's choices and a choice that is not a string are each refused once, at their key's
// line (rival_permits was once decoded twice, and refused twice).
func TestDecoderHelpersRefuse(t *testing.T) {
	const src = `[proxy.p]
address = "198.51.100.1:1080"
username = "u"
password_env = "P"
password_file = "/run/p"
[capture]
rival_permits = "maybe"
uncaged_adapters = 1
`
	_, err := Parse("c.toml", []byte(src), Options{LookupEnv: noEnv, OS: "windows"})
	want := strings.Join([]string{
		`c.toml:5: proxy.p.password_file: give password_env or password_file, not both`,
		`c.toml:7: capture.rival_permits: "maybe": want "warn" or "refuse"`,
		`c.toml:8: capture.uncaged_adapters: must be a string, not an integer`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
}
