package conf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/modelapi"
)

func noEnv(string) (string, bool) { return "", false }

// TestBadConfigs parses every file in testdata/conf/bad; each ends with "# want: LINE: text"
// lines, the exact errors it must give (after "FILE:"), judged for Linux unless a line
// "# os: windows" says otherwise.
func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("../testdata/conf/bad/*.toml")
	if err != nil || len(files) < 25 {
		t.Fatalf("want at least 25 malformed configs, found %d (%v)", len(files), err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			goos := "linux" // "# os: NAME" judges the file for another OS
			for _, line := range strings.Split(string(data), "\n") {
				if w, ok := strings.CutPrefix(line, "# want: "); ok {
					want = append(want, name+":"+w)
				}
				if o, ok := strings.CutPrefix(line, "# os: "); ok {
					goos = strings.TrimSpace(o)
				}
			}
			if len(want) == 0 {
				t.Fatal("no # want: line")
			}
			cfg, err := Parse(name, data, Options{LookupEnv: noEnv, OS: goos})
			if err == nil {
				t.Fatalf("parsed without error: %+v", cfg)
			}
			if got := err.Error(); got != strings.Join(want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error is %T, want conf.Errors", err)
			}
			for _, e := range es {
				if e.Line == 0 || e.Key == "" || e.File != name {
					t.Errorf("error without file, line or key: %+v", e)
				}
			}
		})
	}
}

func TestSpecExample(t *testing.T) {
	cfg, err := Load("../testdata/conf/virtualbox.toml", Options{OS: "windows", LookupEnv: func(k string) (string, bool) {
		if k == "ROUTER_PROXY_PASSWORD" {
			return "s3cret-pw", true
		}
		return "", false
	}})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := cfg.Proxy("exit")
	if !ok || p.Host != "proxy.example.net" || p.Port != 1080 || p.Username != "agent" || p.Password.Reveal() != "s3cret-pw" || p.Line != 11 {
		t.Errorf("proxy = %+v", p)
	}
	if c := cfg.Capture; len(c.VMNetworks) != 0 || len(c.CagedApps) != 3 || c.CagedApps[0].String() != "VirtualBoxVM.exe" || c.Local {
		t.Errorf("capture = %+v", cfg.Capture)
	}
	f := cfg.Forwards[0]
	if f.Listen != netip.MustParseAddrPort("192.168.56.1:47831") || f.Connect != netip.MustParseAddrPort("127.0.0.1:47831") || f.Allow[0] != netip.MustParsePrefix("192.168.56.0/24") {
		t.Errorf("forward = %+v", f)
	}
	var names []string
	for _, r := range cfg.Rules {
		names = append(names, r.Name+"/"+r.Action.String()+"/"+r.Proxy)
	}
	if got, want := strings.Join(names, " "), "model-direct/direct/ hypervisor/proxy/exit default/direct/"; got != want {
		t.Errorf("rules = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(cfg.RuleLines), "[27 33 39]"; got != want {
		t.Errorf("rule lines = %s, want %s", got, want)
	}
	if cfg.DNS.Mode != DNSFakeIP || cfg.DNS.Proxy != "exit" || cfg.DNS.Pool != DefaultPool() {
		t.Errorf("dns = %+v", cfg.DNS)
	}
	// The model rule decides a guest's call to the model; the hypervisor's other traffic
	// (caged: the preset names its process) is proxied.
	tbl := rules.Compile(cfg.Rules)
	v := tbl.Decide(&rules.Query{Network: rules.TCP, Owner: rules.Owner{App: "VBoxHeadless.exe"}, Dst: netip.MustParseAddr("127.0.0.1"), Port: 47831})
	if v.Name != "model-direct" {
		t.Errorf("model flow: %+v", v)
	}
	v = tbl.Decide(&rules.Query{Network: rules.TCP, Owner: rules.Owner{App: "VBoxHeadless.exe"}, Dst: netip.MustParseAddr("203.0.113.10"), Port: 443, Caged: true})
	if v.Name != "hypervisor" || v.Proxy != "exit" {
		t.Errorf("hypervisor flow: %+v", v)
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := Parse("empty.toml", nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		File:    "empty.toml",
		Capture: Capture{ListenerPort: DefaultListenerPort, DNSPort: DefaultDNSPort, UDPPort: DefaultUDPPort, Mark: DefaultMark, Table: DefaultTable},
		DNS:     DNS{Mode: DNSFakeIP, Capture: DNSCaptureCaged, Resolver: DefaultResolver, Pool: DefaultPool(), TTL: DefaultFakeTTL, Transport: DNSOverTCP},
		Relay:   Relay{IdleTimeout: 15 * time.Minute, ConnectTimeout: 10 * time.Second},
		Log:     Log{Level: "info", Format: "text"},
		Policy:  Policy{Unknown: rules.Block, AskTimeout: DefaultAskTimeout},
		loc:     cfg.loc,
		sum:     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", // of no bytes
	}
	if fmt.Sprintf("%+v", *cfg) != fmt.Sprintf("%+v", want) {
		t.Errorf("got  %+v\nwant %+v", *cfg, want)
	}
}

func TestOptionalForms(t *testing.T) {
	src := `
[proxy.only]
address = "[2001:db8::1]:1080"
username = "u"
password_file = "/run/secrets/pw"

[dns]
mode = "proxy"
resolver = "9.9.9.9:53"
ttl = "30s"
direct_names = ["*.local", "nas.home.arpa"]

[relay]
idle_timeout = "30m"
sockmap = true

[[rule]]
ports = [443]
hosts = ["*.openai.com"]
action = "proxy"

[[rule]]
network = "udp"
ports = ["443", 8443, "10000-10100"]
action = "block"
`
	cfg, err := Parse("forms.toml", []byte(src), Options{ReadFile: func(p string) ([]byte, error) {
		if p != "/run/secrets/pw" {
			return nil, os.ErrNotExist
		}
		return []byte("pw-from-file\n"), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Proxies[0]
	if p.Host != "2001:db8::1" || p.Port != 1080 || p.Password.Reveal() != "pw-from-file" {
		t.Errorf("proxy = %+v (password %q)", p, p.Password.Reveal())
	}
	if r := cfg.Rules[0]; r.Name != "rule-1" || r.Proxy != "only" || len(r.Ports) != 1 || r.Hosts[0].String() != "*.openai.com" {
		t.Errorf("rule 1 = %+v", r)
	}
	if r := cfg.Rules[1]; r.Network != rules.UDP || fmt.Sprint(r.Ports) != "[443 8443 10000-10100]" {
		t.Errorf("rule 2 = %+v", r)
	}
	if cfg.DNS.Mode != DNSProxy || cfg.DNS.Resolver != "9.9.9.9:53" || cfg.DNS.TTL != 30*time.Second || len(cfg.DNS.DirectNames) != 2 || cfg.DNS.Proxy != "only" {
		t.Errorf("dns = %+v", cfg.DNS)
	}
	if cfg.Relay.IdleTimeout != 30*time.Minute || !cfg.Relay.Sockmap {
		t.Errorf("relay = %+v", cfg.Relay)
	}
}

// TestForwardAPI: the default is the OpenAI-compatible and Ollama lists, max_body its
// default; api, allow_paths and max_body as written. An HTTP forward's idle_timeout defaults
// to DefaultForwardIdleTimeout, a raw one's to the relay's (0); a written one is kept.
func TestForwardAPI(t *testing.T) {
	cfg, err := Parse("f.toml", []byte(`
[[forward]]
listen = "10.0.2.2:47831"
connect = "127.0.0.1:47831"
allow = ["10.0.2.0/24"]
[[forward]]
listen = "10.0.2.2:47832"
connect = "127.0.0.1:47832"
allow = ["10.0.2.0/24"]
api = ["lmstudio", "openai"]
allow_paths = ["POST /v1/rerank", "/api/v1/chat"]
max_body = "512KiB"
idle_timeout = "30s"
[[forward]]
listen = "10.0.2.2:47833"
connect = "127.0.0.1:47833"
allow = ["10.0.2.0/24"]
api = "tcp"
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := cfg.Forwards
	if !slices.Equal(f[0].API, []modelapi.Kind{modelapi.OpenAI, modelapi.Ollama}) || f[0].MaxBody != DefaultMaxBody || f[0].Raw() {
		t.Errorf("default forward: api %v, max_body %d", f[0].API, f[0].MaxBody)
	}
	if !slices.Equal(f[1].API, []modelapi.Kind{modelapi.LMStudio, modelapi.OpenAI}) || f[1].MaxBody != 512<<10 || len(f[1].AllowPaths) != 3 {
		t.Errorf("second forward: api %v, max_body %d, allow_paths %v", f[1].API, f[1].MaxBody, f[1].AllowPaths)
	}
	if !f[2].Raw() {
		t.Errorf("api = \"tcp\" is not raw: %v", f[2].API)
	}
	for i, want := range []time.Duration{DefaultForwardIdleTimeout, 30 * time.Second, 0} {
		if got := f[i].IdleTimeout; got != want {
			t.Errorf("forward %d: idle_timeout %v, want %v", i+1, got, want)
		}
	}
}

// TestSecretsStaySecret: the password appears in no printing of the config, no log line and
// no error.
func TestSecretsStaySecret(t *testing.T) {
	const pw = "correct-horse-battery-staple"
	env := func(string) (string, bool) { return pw, true }
	cfg, err := Load("../testdata/conf/virtualbox.toml", Options{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "proxy", cfg.Proxies[0], "password", cfg.Proxies[0].Password)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("config", "cfg", cfg)
	js, _ := json.Marshal(cfg)
	for _, out := range []string{
		fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg.Proxies[0].Password),
		fmt.Sprintf("%v %+v %#v %q %x", *cfg, *cfg, *cfg, cfg.Proxies[0].Password, cfg.Proxies[0].Password),
		logs.String(),
		string(js),
	} {
		if strings.Contains(out, pw) {
			t.Errorf("password leaked in %q", out)
		}
	}
	// A bad config next to a good password: the error does not carry it.
	long := strings.Repeat("x", 300)
	_, err = Parse("long.toml", []byte("[proxy.p]\naddress = \"198.51.100.1:1080\"\nusername = \"u\"\npassword_env = \"P\"\n"), Options{LookupEnv: func(string) (string, bool) { return long, true }})
	if err == nil || strings.Contains(err.Error(), long) {
		t.Errorf("err = %v", err)
	}
	_, err = Parse("inline.toml", []byte("[proxy.p]\naddress = \"198.51.100.1:1080\"\nusername = \"u\"\npassword = \""+pw+"\"\n"), Options{})
	if err == nil || strings.Contains(err.Error(), pw) {
		t.Errorf("err = %v", err)
	}
}

func TestSkipSecrets(t *testing.T) {
	if _, err := Load("../testdata/conf/virtualbox.toml", Options{SkipSecrets: true, LookupEnv: noEnv}); err != nil {
		t.Errorf("lint/explain need no password: %v", err)
	}
}

func TestLocate(t *testing.T) {
	src := `# comment with [brackets] and = signs
top = 1
[proxy.exit]
address = "a:1" # trailing
[[rule]]
name = "a#b"
hosts = [
  "x", # one
  'y',
  """z
more""",
  "w",
]
inline = { a = 1, b = [1,
  2] }
[[rule]]
"quoted key" = 2
s = '''line
line'''
after = 3
[capture.sub]
deep = 1
`
	l := locate(src)
	for path, want := range map[string]int{
		"top": 2, "proxy.exit": 3, "proxy.exit.address": 4, "rule[1]": 5, "rule[1].name": 6,
		"rule[1].hosts": 7, "rule[1].hosts[1]": 8, "rule[1].hosts[2]": 9, "rule[1].hosts[3]": 10,
		"rule[1].hosts[4]": 12, "rule[1].inline.a": 14, "rule[1].inline.b[2]": 15, "rule[2]": 16,
		"rule[2].quoted key": 17, "rule[2].after": 20, "capture.sub.deep": 22, "rule[2].unknown": 16,
		"rule": 5,
	} {
		if got := l.line(path); got != want {
			t.Errorf("line(%q) = %d, want %d", path, got, want)
		}
	}
}

func TestUpstreamKeys(t *testing.T) {
	cfg, err := Parse("up.toml", []byte(`
[proxy.primary]
address = "198.51.100.1:1080"
health_check = "30s"
health_target = "example.com:443"

[proxy.backup]
type = "http"
address = "proxy.example.net:3128"
username = "agent"
password_env = "PW"

[dns]
proxy = "primary"
transport = "udp"

[[inbound]]
listen = "192.168.56.1:1080"
allow = ["192.168.56.0/24"]

[[inbound]]
name = "web"
type = "http"
listen = "192.168.56.1:3128"
allow = ["192.168.56.0/24"]

[[rule]]
name = "vm"
sources = ["10.0.2.0/24"]
action = "proxy"
proxy = ["primary", "backup"]
`), Options{LookupEnv: func(string) (string, bool) { return "pw", true }})
	if err != nil {
		t.Fatal(err)
	}
	p, b := cfg.Proxies[0], cfg.Proxies[1]
	if p.Type != ProxySOCKS5 || !p.Pipeline || p.HealthCheck != 30*time.Second || p.HealthTarget != "example.com:443" || !p.CarriesUDP() {
		t.Errorf("primary = %+v", p)
	}
	if b.Type != ProxyHTTP || b.Pipeline || b.CarriesUDP() {
		t.Errorf("backup = %+v (an http proxy does not pipeline by default)", b)
	}
	if r := cfg.Rules[0]; r.Proxy != "primary,backup" || fmt.Sprint(ProxyNames(r.Proxy)) != "[primary backup]" {
		t.Errorf("rule proxy %q", r.Proxy)
	}
	if cfg.DNS.Transport != DNSOverUDP || len(cfg.Inbounds) != 2 || cfg.Inbounds[0].Type != ProxySOCKS5 || cfg.Inbounds[0].Name != "192.168.56.1:1080" || cfg.Inbounds[1].Type != ProxyHTTP {
		t.Errorf("dns %+v, inbounds %+v", cfg.DNS, cfg.Inbounds)
	}
}

// TestScope: the DNS scope follows local unless written; cage subnets join the VM networks.
func TestScope(t *testing.T) {
	for _, tc := range []struct {
		text, os, want string
	}{
		{"", "linux", DNSCaptureCaged},
		{"[capture]\nlocal = true\n", "linux", DNSCaptureAll},
		{"[capture]\nlocal = true\n", "windows", DNSCaptureAll},
		{"[capture]\nlocal = true\n[dns]\ncapture = \"caged\"\n", "windows", DNSCaptureCaged},
		{"[dns]\ncapture = \"all\"\n", "windows", DNSCaptureAll},
	} {
		cfg, err := Parse("s.toml", []byte(tc.text), Options{OS: tc.os})
		if err != nil {
			t.Fatalf("%q: %v", tc.text, err)
		}
		if cfg.DNS.Capture != tc.want {
			t.Errorf("%q on %s: capture %q, want %q", tc.text, tc.os, cfg.DNS.Capture, tc.want)
		}
	}
	cfg, err := Parse("c.toml", []byte("[capture]\ncage_subnets = [\"192.168.200.0/24\"]\n"), Options{OS: "windows"})
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.MustParsePrefix("192.168.200.0/24"); len(cfg.Capture.VMNetworks) != 1 || cfg.Capture.VMNetworks[0] != want {
		t.Errorf("VM networks %v, want the cage subnet", cfg.Capture.VMNetworks)
	}
}

func TestMetricsKeys(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      Metrics
	}{
		{"absent", "", Metrics{}},
		{"empty is off", "[metrics]\nlisten = \"\"\n", Metrics{}},
		{"loopback", "[metrics]\nlisten = \"127.0.0.1:9477\"\n", Metrics{Listen: netip.MustParseAddrPort("127.0.0.1:9477")}},
		{"loopback v6", "[metrics]\nlisten = \"[::1]:9477\"\n", Metrics{Listen: netip.MustParseAddrPort("[::1]:9477")}},
		{"mapped v4 is unmapped", "[metrics]\nlisten = \"[::ffff:127.0.0.1]:9477\"\n", Metrics{Listen: netip.MustParseAddrPort("127.0.0.1:9477")}},
		{"LAN with unsafe", "[metrics]\nlisten = \"192.168.56.1:9477\"\nunsafe_listen = true\n", Metrics{Listen: netip.MustParseAddrPort("192.168.56.1:9477"), UnsafeListen: true}},
		{"any with unsafe", "[metrics]\nunsafe_listen = true\nlisten = \"0.0.0.0:9477\"\n", Metrics{Listen: netip.MustParseAddrPort("0.0.0.0:9477"), UnsafeListen: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse("m.toml", []byte(c.src), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Metrics != c.want {
				t.Errorf("got %+v, want %+v", cfg.Metrics, c.want)
			}
		})
	}
	// The metrics port is none of a forward's ports, whatever the address: the Windows
	// guard opens those to the caged apps by port.
	_, err := Parse("clash.toml", []byte(`
[[forward]]
listen = "192.168.56.1:9477"
connect = "127.0.0.1:47831"
allow = ["192.168.56.0/24"]

[metrics]
listen = "127.0.0.1:9477"
`), Options{})
	if want := `clash.toml:8: metrics.listen: port 9477 is also the port of forward #1 (192.168.56.1:9477), which the guard opens to the VMs: give the metrics a port of their own`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}
