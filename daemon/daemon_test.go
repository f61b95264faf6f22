package daemon

import (
	"strings"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
)

func parse(t *testing.T, src string) *conf.Config {
	t.Helper()
	cfg, err := conf.Parse("t.toml", []byte(src), conf.Options{LookupEnv: func(string) (string, bool) { return "pw", true }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const base = `
[proxy.exit]
address = "198.51.100.1:1080"
username = "u"
password_env = "P"
pipeline = false
[capture]
vm_networks = ["10.0.2.0/24"]
[[forward]]
listen = "10.0.2.2:47831"
connect = "127.0.0.1:47831"
allow = ["10.0.2.0/24"]
[[rule]]
name = "all"
action = "proxy"
`

func TestPolicy(t *testing.T) {
	p := policy(parse(t, base))
	if len(p.Upstreams) != 1 {
		t.Fatalf("upstreams %+v", p.Upstreams)
	}
	u := p.Upstreams[0]
	if u.Name != "exit" || u.Host != "198.51.100.1" || u.Port != 1080 || u.Username != "u" || u.Password != "pw" || u.Pipeline {
		t.Errorf("upstream %+v", u)
	}
	if p.Rules.Decide(&rules.Query{}).Name != "all" || len(p.VMNetworks) != 1 || p.IdleTimeout != conf.DefaultIdleTimeout {
		t.Errorf("policy %+v", p)
	}
	if f := forwardOf(parse(t, base).Forwards[0]); f.Name != "10.0.2.2:47831" {
		t.Errorf("an unnamed forward is named %q, want its listen address", f.Name)
	}
}

func TestRestartNeeded(t *testing.T) {
	old := parse(t, base)
	for _, tt := range []struct {
		change string
		want   string // "" when a reload may apply it
	}{
		{`[[rule]]` + "\nname = \"more\"\naction = \"block\"\n", ""},
		{"[relay]\nidle_timeout = \"1h\"\n", ""},
		{"[dns]\nmode = \"proxy\"\n", "dns"},
		{"[control]\nsocket = \"/tmp/x.sock\"\n", "control"},
	} {
		err := restartNeeded(old, parse(t, base+tt.change))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v", tt.change, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: got %v, want an error naming %s", tt.change, err, tt.want)
		}
	}
	cur := parse(t, strings.Replace(base, "[capture]\n", "[capture]\nlistener_port = 4000\nmark = 7\n", 1))
	if err := restartNeeded(old, cur); err == nil || !strings.Contains(err.Error(), "capture.listener_port") || !strings.Contains(err.Error(), "capture.mark") {
		t.Errorf("got %v", err)
	}
}
