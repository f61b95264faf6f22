package conf

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentcage/router/internal/winetest"
	"github.com/agentcage/router/rules"
)

// writeHosts writes a hosts file and a config whose one rule reads it.
func writeHosts(t *testing.T, dir, hosts, rule string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "allow"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "allow", "npm.txt"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "router.toml")
	data := "[proxy.exit]\naddress = \"127.0.0.1:1080\"\n\n[[rule]]\nname = \"npm\"\n" + rule + "action = \"proxy\"\n"
	if err := os.WriteFile(cfg, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func hostStrings(hs []rules.Host) string {
	var out []string
	for _, h := range hs {
		out = append(out, h.String())
	}
	return strings.Join(out, " ")
}

// TestHostsFile: a rule's hosts_file is read relative to the config file, its entries added
// after the rule's hosts; comments and blank lines are skipped.
func TestHostsFile(t *testing.T) {
	dir := winetest.TempDir(t)
	path := writeHosts(t, dir, "# the npm registry\nregistry.npmjs.org\n\n*.npmjs.com # its CDN\n104.16.0.0/13\n2606:4700::6810:1\n",
		"hosts = [\"example.org\"]\nhosts_file = [\"allow/npm.txt\"]\n")
	cfg, err := Load(path, Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	got := hostStrings(cfg.Rules[0].Hosts)
	want := "example.org registry.npmjs.org *.npmjs.com 104.16.0.0/13 2606:4700::6810:1"
	if got != want {
		t.Errorf("hosts = %q, want %q", got, want)
	}
	q := rules.Query{Host: "registry.npmjs.org", Port: 443}
	if !cfg.Rules[0].Match(&q) {
		t.Error("the rule does not match a name from its hosts file")
	}
}

// TestHostsFileErrors: each bad line is an error at the hosts file's own line, every one at
// once; a missing file and an over-large one are errors at the key.
func TestHostsFileErrors(t *testing.T) {
	dir := winetest.TempDir(t)
	path := writeHosts(t, dir, "registry.npmjs.org\nnot a host\n*.x.*\n\n10.0.0.0/33\n", "hosts_file = [\"allow/npm.txt\"]\n")
	_, err := Load(path, Options{LookupEnv: noEnv})
	if err == nil {
		t.Fatal("a bad hosts file loaded")
	}
	file := filepath.Join(dir, "allow", "npm.txt")
	for _, want := range []string{file + ":2: ", file + ":3: ", file + ":5: ", `rule #1 "npm", hosts_file[1] (line 6 of ` + path + `)`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not hold %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), file+":1:") {
		t.Errorf("a good line was reported:\n%v", err)
	}

	path = writeHosts(t, dir, "", "hosts_file = [\"allow/missing.txt\"]\n")
	if _, err := Load(path, Options{LookupEnv: noEnv}); err == nil || !strings.Contains(err.Error(), path+":6: rule #1 \"npm\", hosts_file[1]: read hosts file") {
		t.Errorf("missing file: %v", err)
	}
	big := strings.Repeat("a.example\n", MaxHostFileSize/10+1)
	path = writeHosts(t, dir, big, "hosts_file = [\"allow/npm.txt\"]\n")
	if _, err := Load(path, Options{LookupEnv: noEnv}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file over %d bytes: %v", MaxHostFileSize, err)
	}
	path = writeHosts(t, dir, "# nothing\n", "hosts_file = [\"allow/npm.txt\"]\n")
	if _, err := Load(path, Options{LookupEnv: noEnv}); err == nil || !strings.Contains(err.Error(), "lists no host") {
		t.Errorf("an empty list: %v", err)
	}
}

func TestParseHostListBounds(t *testing.T) {
	var b strings.Builder
	for i := range MaxHostFileEntries + 1 {
		fmt.Fprintf(&b, "h%d.e\n", i)
	}
	if b.Len() > MaxHostFileSize {
		t.Skipf("the entries bound is not reachable within the size bound (%d bytes)", b.Len())
	}
	hosts, errs := ParseHostList([]byte(b.String()))
	if len(hosts) != MaxHostFileEntries || len(errs) != 1 || errs[0].Line != MaxHostFileEntries+1 {
		t.Errorf("got %d hosts and %v", len(hosts), errs)
	}
}

// TestHostPresets: every preset parses and is documented; a preset's hosts are added to
// the rule; an unknown name is refused with a suggestion.
func TestHostPresets(t *testing.T) {
	doc, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range HostPresetNames() {
		list, _ := LookupHostPreset(name)
		for _, s := range list {
			if _, err := rules.ParseHost(s); err != nil {
				t.Errorf("preset %s: %v", name, err)
			}
		}
		if !strings.Contains(string(doc), "| `"+name+"` |") {
			t.Errorf("docs/config.md has no row for the hosts preset %q", name)
		}
	}
	cfg, err := Parse("p.toml", []byte("[proxy.exit]\naddress = \"127.0.0.1:1080\"\n[[rule]]\nhosts_preset = [\"go\", \"openai\"]\naction = \"proxy\"\n"), Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if got := hostStrings(cfg.Rules[0].Hosts); got != "proxy.golang.org sum.golang.org api.openai.com" {
		t.Errorf("hosts = %q", got)
	}
	_, err = Parse("p.toml", []byte("[proxy.exit]\naddress = \"127.0.0.1:1080\"\n[[rule]]\nhosts_preset = [\"pipy\"]\naction = \"proxy\"\n"), Options{LookupEnv: noEnv})
	if err == nil || !strings.Contains(err.Error(), `p.toml:4: rule #1 "rule-1", hosts_preset[1]: "pipy" is not a hosts preset`) || !strings.Contains(err.Error(), `did you mean "pypi"?`) {
		t.Errorf("unknown preset: %v", err)
	}
	for _, s := range DoHEndpoints() {
		if _, err := rules.ParseHost(s); err != nil {
			t.Errorf("DoH endpoint %q: %v", s, err)
		}
	}
}

// TestDoHKeys: [dns] allow_doh and doh_hosts decode; the refusal is on by default.
func TestDoHKeys(t *testing.T) {
	cfg, err := Parse("d.toml", []byte("[proxy.exit]\naddress = \"127.0.0.1:1080\"\n"), Options{LookupEnv: noEnv})
	if err != nil || cfg.DNS.AllowDoH {
		t.Fatalf("default: %v, allow_doh %v", err, cfg != nil && cfg.DNS.AllowDoH)
	}
	cfg, err = Parse("d.toml", []byte("[proxy.exit]\naddress = \"127.0.0.1:1080\"\n[dns]\nallow_doh = true\ndoh_hosts = [\"doh.corp.example\", \"192.0.2.53\"]\n[log]\nflows = \"flows.jsonl\"\n"), Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.DNS.AllowDoH || hostStrings(cfg.DNS.DoHHosts) != "doh.corp.example 192.0.2.53" || cfg.Log.Flows != "flows.jsonl" {
		t.Errorf("got allow_doh %v, doh_hosts %v, flows %q", cfg.DNS.AllowDoH, cfg.DNS.DoHHosts, cfg.Log.Flows)
	}
	if _, err = Parse("d.toml", []byte("[dns]\nallow_doh = \"no\"\n"), Options{LookupEnv: noEnv}); err == nil || !strings.Contains(err.Error(), "d.toml:2: dns.allow_doh") {
		t.Errorf("a string allow_doh: %v", err)
	}
}

// FuzzParseHostList: any bytes give entries that print as a rule's hosts would parse them
// again, and lines within the file.
func FuzzParseHostList(f *testing.F) {
	f.Add([]byte("registry.npmjs.org\n*.npmjs.com # cdn\n10.0.0.0/8\n::1\n"))
	f.Add([]byte("# only a comment"))
	f.Add([]byte("a b\n\x00\n*.\n1.2.3.4-1.2.3.1\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		hosts, errs := ParseHostList(data)
		lines := strings.Count(string(data), "\n") + 1
		for _, e := range errs {
			if e.Line < 1 || e.Line > lines || !utf8.ValidString(e.Msg) && utf8.Valid(data) {
				t.Fatalf("error %+v for %d lines", e, lines)
			}
		}
		for _, h := range hosts {
			again, err := rules.ParseHost(h.String())
			if err != nil || again != h {
				t.Fatalf("%v printed %q, parsed back as %v, %v", h, h.String(), again, err)
			}
		}
	})
}
