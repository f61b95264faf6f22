package learn_test

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/cmd/router/learn"
	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/conf/lint"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// base is the session's config without its catch-all rule: what the suggestion is pasted
// into.
const base = `
[proxy.exit]
address = "192.0.2.1:1080"

[capture]
vm_networks = ["10.0.2.0/24"]
`

func presets() []learn.Preset {
	var ps []learn.Preset
	for _, n := range conf.HostPresetNames() {
		h, _ := conf.LookupHostPreset(n)
		ps = append(ps, learn.Preset{Name: n, Hosts: h})
	}
	return ps
}

// session is a learning session's flow log: npm and GitHub (presets), three names of one
// domain, a name of another, a flow without a name, a DoH refusal, and a name a hostile
// guest sent to break out of the TOML.
func session(t *testing.T) string {
	t.Helper()
	at := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	src := netip.MustParseAddrPort("10.0.2.15:40000")
	var b strings.Builder
	rec := func(event, name string, dst string, port uint16, reason string) {
		r := auditlog.Record{Time: at, Event: event, Network: "tcp", Src: src, Caged: true, Name: name, Rule: "learn", Action: "proxy", Upstream: "exit", Up: 100, Down: 1000}
		if dst != "" {
			r.Dst = netip.MustParseAddrPort(dst)
		} else {
			r.DstPort = port
		}
		if event == auditlog.EventRefused {
			r.Action, r.Reason, r.Upstream = "block", reason, ""
		}
		at = at.Add(time.Second)
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	rec("flow", "registry.npmjs.org", "198.18.0.1:443", 0, "")
	rec("flow", "registry.npmjs.org", "198.18.0.1:443", 0, "")
	rec("flow", "codeload.github.com", "", 443, "")
	rec("flow", "api.example.com", "", 443, "")
	rec("flow", "www.example.com", "", 443, "")
	rec("flow", "Example.com.", "", 80, "")
	rec("flow", "files.other.test", "", 443, "")
	rec("flow", "", "203.0.113.7:443", 0, "")
	rec("refused", "dns.google", "", 443, "doh")
	rec("flow", "x\"]\n[[rule]]\naction = \"direct", "", 443, "")
	// This host's own flow: not the cage's.
	own := auditlog.Record{Time: at, Event: "flow", Network: "tcp", Name: "updates.example.net", Dst: netip.MustParseAddrPort("192.0.2.9:443"), Action: "direct"}
	line, _ := json.Marshal(own)
	b.Write(append(line, '\n'))
	return b.String()
}

// TestSuggest: the proposal lints clean, and run as the config it lets the same session
// through the proxy and refuses a new name, a flow without a name and the hostile one.
func TestSuggest(t *testing.T) {
	s := learn.NewSession()
	if err := s.Read(strings.NewReader(session(t)), "flows.jsonl"); err != nil {
		t.Fatal(err)
	}
	if s.Records != 9 || s.Other != 1 || s.BadName != 1 {
		t.Errorf("records %d, other %d, bad names %d; want 9, 1, 1", s.Records, s.Other, s.BadName)
	}
	var out strings.Builder
	if err := s.Suggest(&out, learn.Options{Presets: presets(), Source: "flows.jsonl"}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Log("\n" + text)
	for _, want := range []string{`hosts_preset = ["npm"]`, `hosts_preset = ["github"]`,
		`hosts = ["api.example.com", "example.com", "www.example.com"]`, `ports = ["80", "443"]`, `hosts = ["files.other.test"]`,
		`proxy = "exit"`, "203.0.113.7 port 443", "dns.google port 443: 1 flows (doh)", "1 flows named something"} {
		if !strings.Contains(text, want) {
			t.Errorf("the proposal lacks %q", want)
		}
	}
	if strings.Contains(text, `action = "direct"`) {
		t.Error("a name from the flow log broke into the TOML")
	}
	cfg, err := conf.Parse("suggested.toml", []byte(base+text), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatalf("the proposal does not load: %v", err)
	}
	if fs := lint.Check(cfg, lint.Host{OS: "linux"}); lint.HasErrors(fs) {
		t.Errorf("lint: %v", fs)
	}
	pol := policy.New(cfg, policy.Env{})
	guest := netip.MustParseAddr("10.0.2.15")
	for _, c := range []struct {
		host string
		addr string
		port uint16
		want rules.Action
	}{
		{"registry.npmjs.org", "", 443, rules.Proxy},
		{"codeload.github.com", "", 443, rules.Proxy},
		{"api.example.com", "", 443, rules.Proxy},
		{"example.com", "", 80, rules.Proxy},
		{"files.other.test", "", 443, rules.Proxy},
		{"new.other.test", "", 443, rules.Block},
		{"api.example.com", "", 22, rules.Block}, // a port the session never used
		{"", "203.0.113.7", 443, rules.Block},
		{"dns.google", "", 443, rules.Block},
	} {
		f := &policy.Flow{Network: rules.TCP, Src: guest, Host: c.host, Port: c.port}
		if c.addr != "" {
			f.Dst = netip.MustParseAddr(c.addr)
		}
		if d := pol.Decide(f); d.Action != c.want || !d.Caged {
			t.Errorf("%s%s:%d: %v (%s), caged %v; want %v", c.host, c.addr, c.port, d.Action, d.Name, d.Caged, c.want)
		}
	}
}

// TestReadErrors: a line that is not a record is reported with its file and line; a last
// line cut short (the daemon writing it) is not an error.
func TestReadErrors(t *testing.T) {
	s := learn.NewSession()
	err := s.Read(strings.NewReader("{\"event\":\"flow\"}\nnot json\n{}\n"), "f.jsonl")
	if err == nil || !strings.Contains(err.Error(), "f.jsonl:2:") {
		t.Errorf("error %v; want f.jsonl:2", err)
	}
	if err := learn.NewSession().Read(strings.NewReader("{\"event\":\"flow\"}\n{\"event\":\"fl"), "f.jsonl"); err != nil {
		t.Errorf("a cut last line: %v", err)
	}
}

// FuzzRead: any flow log reads without a panic, and what it suggests never holds a line
// that did not come from the suggestion's own text (a name cannot add a key or a table).
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"time":"2026-12-01T22:00:00Z","event":"flow","caged":true,"name":"a.example.com","dst":"a.example.com:443","action":"proxy","upstream":"exit"}` + "\n"))
	f.Add([]byte(`{"event":"flow","caged":true,"name":"x\"]\n[[rule]]","dst":"1.2.3.4:5","upstream":"e\"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := learn.NewSession()
		_ = s.Read(strings.NewReader(string(b)), "f")
		var out strings.Builder
		if s.Suggest(&out, learn.Options{Proxy: "exit"}) != nil {
			return
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if line == "" || strings.HasPrefix(line, "#") || line == "[[rule]]" {
				continue
			}
			k, _, ok := strings.Cut(line, " = ")
			switch {
			case !ok:
				t.Fatalf("a line that is no key: %q", line)
			case k != "name" && k != "caged" && k != "hosts" && k != "hosts_preset" && k != "ports" && k != "action" && k != "proxy":
				t.Fatalf("an unexpected key: %q", line)
			}
		}
	})
}
