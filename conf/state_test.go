package conf

import (
	"path/filepath"
	"testing"
)

func TestDefaultStateDir(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, c := range []struct {
		goos string
		env  map[string]string
		want string
	}{
		{"linux", nil, "/var/lib/router"},
		{"linux", map[string]string{"STATE_DIRECTORY": "/var/lib/router"}, "/var/lib/router"},
		{"linux", map[string]string{"STATE_DIRECTORY": "/tmp/s1:/tmp/s2"}, "/tmp/s1"},
		{"windows", map[string]string{"ProgramData": `D:\PD\`}, `D:\PD\router`},
		{"windows", nil, `C:\ProgramData\router`},
	} {
		if got := DefaultStateDir(c.goos, env(c.env)); got != c.want {
			t.Errorf("DefaultStateDir(%s, %v) = %q; want %q", c.goos, c.env, got, c.want)
		}
	}
}

// TestStateFiles: with a state directory, the approved rules file and a learning session's
// flow log default into it; a relative [policy] approved or [log] flows stays relative to
// the config; without one, both defaults sit beside the config.
func TestStateFiles(t *testing.T) {
	dir := filepath.FromSlash("/srv/t") // paths only: nothing is read or written
	cfgFile := filepath.Join(dir, "etc", "router.toml")
	state := filepath.Join(dir, "state")
	src := "[proxy.exit]\naddress = \"198.51.100.1:1080\"\n[policy]\nunknown = \"ask\"\n"
	for _, c := range []struct {
		name, state, extra   string
		wantApproved, wantFl string
	}{
		{"state directory", state, "", filepath.Join(state, "approved.toml"), filepath.Join(state, "flows.jsonl")},
		{"none: beside the config", "", "", filepath.Join(dir, "etc", "approved.toml"), filepath.Join(dir, "etc", "flows.jsonl")},
		{"keys relative to the config", state, "approved = \"mine.toml\"\n[log]\nflows = \"f.jsonl\"\n",
			filepath.Join(dir, "etc", "mine.toml"), filepath.Join(dir, "etc", "f.jsonl")},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse(cfgFile, []byte(src+c.extra), Options{SkipSecrets: true, OS: "linux", StateDir: c.state})
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Policy.ApprovedPath(cfg.File); got != c.wantApproved {
				t.Errorf("approved rules at %q; want %q", got, c.wantApproved)
			}
			if err := Learning(cfg, cfgFile); err != nil {
				t.Fatal(err)
			}
			if cfg.Log.Flows != c.wantFl {
				t.Errorf("a learning session's flow log at %q; want %q", cfg.Log.Flows, c.wantFl)
			}
		})
	}
}
