package proxifier_test

import (
	"bytes"
	"errors"
	"flag"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/conf/lint"
	"github.com/agentcage/router/conf/proxifier"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

var update = flag.Bool("update", false, "rewrite the expected .toml and .notes files")

// profiles are every profile under testdata/proxifier but the bad ones: the real public
// ones and those written here.
func profiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir("../../testdata/proxifier", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "bad" {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".ppx") {
			out = append(out, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil || len(out) < 9 {
		t.Fatalf("profiles: %v, %d found", err, len(out))
	}
	return out
}

func convert(t *testing.T, file string) (*proxifier.Profile, proxifier.Result, *conf.Config) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return importProfile(t, filepath.Base(file), data, filepath.Base(file))
}

// importProfile parses data as the profile name, converts it with source as the profile
// the config names, and loads the config it writes; any step failing fails t.
func importProfile(t *testing.T, name string, data []byte, source string) (*proxifier.Profile, proxifier.Result, *conf.Config) {
	t.Helper()
	p, err := proxifier.Parse(name, data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	res := proxifier.Convert(p, proxifier.Options{Source: source})
	cfg, err := conf.Parse("router.toml", res.TOML, conf.Options{SkipSecrets: true, OS: res.OS})
	if err != nil {
		t.Fatalf("the config does not load:\n%v\n%s", err, res.TOML)
	}
	return p, res, cfg
}

// TestImport imports every profile and checks the config and the notes against the files
// beside it (go test -update rewrites them); each config loads, and lints without error,
// but for the trap, whose error is the one lint reports for it.
func TestImport(t *testing.T) {
	public := 0
	for _, file := range profiles(t) {
		if strings.Contains(file, "/public/") {
			public++
		}
		t.Run(strings.TrimPrefix(file, "../../testdata/proxifier/"), func(t *testing.T) {
			_, res, cfg := convert(t, file)
			var notes bytes.Buffer
			for _, n := range res.Notes {
				notes.WriteString(n.String() + "\n")
			}
			base := strings.TrimSuffix(file, ".ppx")
			for ext, got := range map[string][]byte{".toml": res.TOML, ".notes": notes.Bytes()} {
				if *update {
					if err := os.WriteFile(base+ext, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(base + ext)
				if err != nil {
					t.Fatalf("%v (run go test -update)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from %s%s (go test -update rewrites it):\n%s", ext, base, ext, got)
				}
			}
			findings := lint.Check(cfg, lint.Host{OS: res.OS})
			var errs []string
			for _, f := range findings {
				if f.Severity == lint.Error {
					errs = append(errs, f.Check+": "+f.Message)
				}
			}
			var checks []string
			for _, e := range errs {
				checks = append(checks, e[:strings.Index(e, ":")])
			}
			// Lint's errors are its verdict on what the profile does, printed by the import;
			// these profiles have them, each for its reason.
			want := map[string][]string{
				// The trap: the hypervisor rule, which catches svchost.exe, shadows the
				// model's Direct rule for its local destinations.
				"windows-trap.ppx": {lint.CheckLocalViaProxy},
				// "Proxy Softwares" (apps ss*) sends ssh direct anywhere, while the rule
				// "Github" names ssh for the proxy: a caged app let out.
				"Current.ppx":            {lint.CheckDirectCaged},
				"Current-2016-01-09.ppx": {lint.CheckDirectCaged},
			}[filepath.Base(file)]
			if !slices.Equal(checks, want) {
				t.Errorf("lint errors %q, want %q:\n%s", checks, want, strings.Join(errs, "\n"))
			}
			if filepath.Base(file) == "windows-trap.ppx" && !strings.Contains(errs[0], `"Model direct" is shadowed for local destinations: rule #1 "Hypervisor"`) {
				t.Errorf("the trap: %s", errs[0])
			}
		})
	}
	if public < 5 {
		t.Errorf("%d public profiles, want at least 5", public)
	}
}

// TestNoSecretInOutput: a profile's password is in no output, and every proxy that had one
// has a password_env to fill.
func TestNoSecretInOutput(t *testing.T) {
	for _, file := range profiles(t) {
		p, res, cfg := convert(t, file)
		data, _ := os.ReadFile(file)
		for _, l := range strings.Split(string(data), "\n") {
			_, rest, ok := strings.Cut(l, "<Password>")
			if !ok {
				continue
			}
			pw, _, _ := strings.Cut(rest, "</Password>")
			var notes strings.Builder
			for _, n := range res.Notes {
				notes.WriteString(n.Msg)
			}
			if pw != "" && (bytes.Contains(res.TOML, []byte(pw)) || strings.Contains(notes.String(), pw)) {
				t.Errorf("%s: the password %q is in the output", file, pw)
			}
		}
		for _, px := range p.Proxies {
			if !px.Auth || px.Type == "SOCKS4" {
				continue
			}
			for _, c := range cfg.Proxies {
				if c.Address != "" && strings.HasPrefix(c.Name, "proxy"+px.ID) && c.PasswordEnv == "" {
					t.Errorf("%s: proxy %s has credentials but no password_env", file, px.ID)
				}
			}
		}
	}
}

// verdict is what a flow gets: "direct", "block", "refused", or "proxy NAME[,NAME]".
func routerVerdict(pol *policy.Policy, app, target string, port uint16) string {
	f := &policy.Flow{Network: rules.TCP, Port: port, Owner: rules.Owner{App: app}}
	if strings.Contains(app, `\`) {
		f.App, f.AppPath = "", app
	}
	if a, err := netip.ParseAddr(target); err == nil {
		f.Dst = a
	} else {
		f.Host = target
	}
	d := pol.Decide(f)
	switch {
	case d.Step == policy.StepCaged:
		return "refused"
	case d.Step == policy.StepHost:
		return "refused (host)"
	case d.Action == rules.Proxy:
		return "proxy " + d.Proxy
	}
	return d.Action.String()
}

// profileVerdict is what the profile does with the flow, by Proxifier's rules as this test
// reads them: the first enabled rule whose applications, targets and ports all match.
func profileVerdict(p *proxifier.Profile, app, target string, port uint16) (string, *proxifier.Rule) {
	for i := range p.Rules {
		r := &p.Rules[i]
		if !r.Enabled || !anyMatch(r.Applications.Items, func(s string) bool { return appMatch(strings.Trim(s, `"`), app) }) ||
			!anyMatch(r.Targets.Items, func(s string) bool { return targetMatch(s, target) }) ||
			!anyMatch(r.Ports.Items, func(s string) bool { return portMatch(s, port) }) {
			continue
		}
		switch r.Action {
		case "Proxy", "Chain":
			return r.Action + " " + r.ActionID, r
		}
		return strings.ToLower(r.Action), r
	}
	return "none", nil
}

func anyMatch(items []string, f func(string) bool) bool {
	return len(items) == 0 || slices.ContainsFunc(items, f)
}

func appMatch(pat, app string) bool {
	pat, app = strings.ToLower(strings.ReplaceAll(pat, `\`, "/")), strings.ToLower(strings.ReplaceAll(app, `\`, "/"))
	if !strings.Contains(pat, "/") {
		app = path.Base(app)
	}
	ok, _ := path.Match(pat, app)
	return ok
}

func targetMatch(pat, target string) bool {
	pat = strings.ReplaceAll(strings.TrimSpace(pat), " ", "")
	if a, err := netip.ParseAddr(target); err == nil {
		if lo, hi, ok := strings.Cut(pat, "-"); ok {
			l, e1 := netip.ParseAddr(lo)
			h, e2 := netip.ParseAddr(hi)
			return e1 == nil && e2 == nil && l.Compare(a) <= 0 && a.Compare(h) <= 0
		}
		if pf, err := netip.ParsePrefix(pat); err == nil {
			return pf.Contains(a)
		}
		ok, _ := path.Match(pat, a.String())
		return ok
	}
	ok, _ := path.Match(strings.ToLower(pat), strings.ToLower(target))
	return ok
}

func portMatch(pat string, port uint16) bool {
	lo, hi, ok := strings.Cut(strings.ReplaceAll(pat, " ", ""), "-")
	if !ok {
		hi = lo
	}
	l, e1 := strconv.Atoi(lo)
	h, e2 := strconv.Atoi(hi)
	return e1 == nil && e2 == nil && l <= int(port) && int(port) <= h
}

// TestExplainAgrees: for a table of flows (app, target, port), the imported config decides
// as the profile would: the same action, through the proxies its proxy or chain became. The
// one difference the import announces: an app of a proxy or block rule is caged, so its
// flows that fall to a direct Default are refused.
func TestExplainAgrees(t *testing.T) {
	flows := []struct {
		file, app, target string
		port              uint16
		want              string // the router's verdict
	}{
		{"windows-v4-everything.ppx", "firefox.exe", "127.0.0.1", 8080, "refused (host)"},
		{"windows-v4-everything.ppx", "explorer.exe", "127.0.0.1", 8080, "direct"},
		{"windows-v4-everything.ppx", "firefox.exe", "192.168.1.20", 443, "direct"},
		{"windows-v4-everything.ppx", "explorer.exe", "10.9.8.7", 445, "direct"},
		{"windows-v4-everything.ppx", "explorer.exe", "172.20.0.1", 80, "direct"},
		{"windows-v4-everything.ppx", "explorer.exe", "printer.lan", 631, "direct"},
		{"windows-v4-everything.ppx", "explorer.exe", "a.telemetry.example.com", 443, "block"},
		{"windows-v4-everything.ppx", "explorer.exe", "vortex.data.example.com", 443, "block"},
		{"windows-v4-everything.ppx", "firefox.exe", "example.com", 443, "proxy proxy100"},
		{"windows-v4-everything.ppx", "FIREFOX.EXE", "example.com", 8443, "proxy proxy100"},
		{"windows-v4-everything.ppx", `C:\Program Files\Mozilla Firefox\firefox.exe`, "example.com", 80, "proxy proxy100"},
		{"windows-v4-everything.ppx", "firefox.exe", "example.com", 9443, "refused"},
		{"windows-v4-everything.ppx", "thunderbird.exe", "mail.example.com", 993, "direct"},
		{"windows-v4-everything.ppx", "git.exe", "github.com", 443, "proxy chain200"},
		{"windows-v4-everything.ppx", "ssh.exe", "ssh.github.com", 22, "proxy chain200"},
		{"windows-v4-everything.ppx", "git.exe", "gitlab.com", 443, "refused"},
		{"windows-v4-everything.ppx", "curl.exe", "198.51.100.77", 443, "proxy chain201"},
		{"windows-v4-everything.ppx", "node.exe", "registry.npmjs.org", 443, "proxy proxy104,proxy100"},
		{"windows-v4-everything.ppx", "python3.exe", "pypi.org", 443, "proxy proxy100,proxy104"},
		{"windows-v4-everything.ppx", "java.exe", "repo.maven.org", 443, "proxy proxy103"},
		{"windows-v4-everything.ppx", "code.exe", "marketplace.example.com", 443, "proxy proxy102"},
		{"windows-v4-everything.ppx", "explorer.exe", "example.com", 443, "direct"},
		{"macos-v3-chain.ppx", "ShadowsocksX", "example.com", 443, "direct"},
		{"macos-v3-chain.ppx", "Skype", "example.com", 443, "proxy chain200"},
		// "Unknown chain" (a chain the profile lacks) comes first for Safari: carried as a
		// block rule, never left to a later rule.
		{"macos-v3-chain.ppx", "Safari", "example.com", 443, "block"},
		{"windows-v4-everything.ppx", "putty.exe", "example.com", 22, "block"},
		{"macos-v3-chain.ppx", "Finder", "192.0.2.1", 80, "block"},
		{"windows-fixed.ppx", "VBoxHeadless.exe", "10.0.2.2", 47831, "direct"},
		{"windows-fixed.ppx", "svchost.exe", "127.0.0.1", 47831, "direct"},
		{"windows-fixed.ppx", "svchost.exe", "127.0.0.1", 8080, "direct"}, // svchost.exe is never caged by image
		{"windows-fixed.ppx", "VirtualBoxVM.exe", "example.com", 443, "proxy proxy100"},
		{"windows-fixed.ppx", "firefox.exe", "example.com", 443, "direct"},
		{"public/jamesits/default.ppx", "ShadowsocksX", "example.com", 443, "direct"},
		{"public/jamesits/default.ppx", "Safari", "example.com", 443, "proxy proxy100"},
		{"public/jamesits/default.ppx", "Safari", "127.0.0.1", 8080, "direct"},
	}
	type imported struct {
		p   *proxifier.Profile
		pol *policy.Policy
		cfg *conf.Config
	}
	cache := map[string]imported{}
	for _, fl := range flows {
		t.Run(fl.file+"/"+fl.app+"/"+fl.target+":"+strconv.Itoa(int(fl.port)), func(t *testing.T) {
			im, ok := cache[fl.file]
			if !ok {
				p, _, cfg := convert(t, "../../testdata/proxifier/"+fl.file)
				im = imported{p, policy.New(cfg, policy.Env{}), cfg}
				cache[fl.file] = im
			}
			got := routerVerdict(im.pol, fl.app, fl.target, fl.port)
			if got != fl.want {
				t.Errorf("router: %s, want %s", got, fl.want)
			}
			// The profile's verdict, mapped to the router's names.
			pv, r := profileVerdict(im.p, fl.app, fl.target, fl.port)
			want := pv
			if r != nil && (r.Action == "Proxy" || r.Action == "Chain") {
				for _, rl := range im.cfg.Rules {
					if rl.Name == r.Name {
						want = "proxy " + rl.Proxy
						if rl.Action == rules.Block {
							want = "block" // its proxy is not carried: refused, as the import said
						}
					}
				}
			}
			switch {
			case r != nil && !slices.ContainsFunc(im.cfg.Rules, func(rl rules.Rule) bool { return rl.Name == r.Name }):
				return // the rule is not carried, and the import said so
			case r != nil && r.Action != "Direct" && strings.EqualFold(fl.app, "svchost.exe"):
				return // svchost.exe is not carried into a caging rule, and the import said so
			case want == "direct" && got == "refused" && r.Name == "Default":
				want = "refused" // a caged app falls off the rules: announced by the import
			case want == "direct" && got == "refused (host)":
				want = got // a caged app reaches this host only on the ports named: announced
			case strings.HasPrefix(want, "proxy ") && got == "refused (host)":
				want = got // the profile's trap: this host sent to a remote proxy; local stays local
			}
			if want != got {
				t.Errorf("profile: %s (rule %v), router: %s", pv, r != nil && r.Name != "", got)
			}
		})
	}
}

func TestBadProfiles(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/proxifier/bad/*.ppx")
	if len(files) < 5 {
		t.Fatalf("%d bad profiles", len(files))
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, _ := os.ReadFile(file)
			_, want, _ := strings.Cut(string(data), "<!-- want: ")
			want, _, _ = strings.Cut(want, " -->")
			_, err := proxifier.Parse(filepath.Base(file), data)
			var pe *proxifier.Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse: %v, want a *proxifier.Error", err)
			}
			if got := strconv.Itoa(pe.Line) + ": " + pe.Msg; got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

func TestTooLarge(t *testing.T) {
	_, err := proxifier.Parse("big.ppx", make([]byte, proxifier.MaxSize+1))
	if err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("Parse of a too large profile: %v", err)
	}
}

// FuzzImport: whatever the bytes, Parse returns in bounded time, and whatever it accepts,
// Convert turns into a config that loads.
func FuzzImport(f *testing.F) {
	files, _ := filepath.Glob("../../testdata/proxifier/*.ppx")
	bad, _ := filepath.Glob("../../testdata/proxifier/bad/*.ppx")
	for _, file := range append(files, bad...) {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := proxifier.Parse("f.ppx", data)
		if err != nil {
			return
		}
		res := proxifier.Convert(p, proxifier.Options{})
		if len(res.TOML) > conf.MaxFileSize {
			return // refused by `router import` with its own message
		}
		if _, err := conf.Parse("f.toml", res.TOML, conf.Options{SkipSecrets: true, OS: res.OS}); err != nil {
			t.Fatalf("the config of an accepted profile does not load: %v\n%s", err, res.TOML)
		}
	})
}

// TestNoInjection: ids, types and names a profile writes cannot add lines to the config
// (a newline in a comment would end it) or control characters to what the import prints.
func TestNoInjection(t *testing.T) {
	profile := `<?xml version="1.0"?>
<ProxifierProfile version="1&#10;[proxy.evil]" platform="Windows&#10;[proxy.evil2]">
<ProxyList><Proxy id="1&#10;[proxy.evil3]" type="SOCKS5&#9;X"><Address>192.0.2.1</Address><Port>1080</Port></Proxy></ProxyList>
<ChainList><Chain id="9&#10;[proxy.evil4]" type="redundancy"><Name>x&#10;[proxy.evil5]</Name><Proxy enabled="true">1&#10;[proxy.evil3]</Proxy></Chain></ChainList>
<RuleList>
<Rule enabled="true"><Name>a&#10;[proxy.evil6]</Name><Applications>x.exe</Applications><Action type="Chain">9&#10;[proxy.evil4]</Action></Rule>
<Rule enabled="true"><Name>b</Name><Action type="Chain">nope&#10;[proxy.evil7]</Action></Rule>
<Rule enabled="true"><Name>Default</Name><Action type="Direct"/></Rule>
</RuleList></ProxifierProfile>`
	_, res, cfg := importProfile(t, "evil.ppx", []byte(profile), "evil\n[proxy.evil8].ppx")
	for _, px := range cfg.Proxies {
		if strings.HasPrefix(px.Name, "evil") {
			t.Errorf("a profile's value made [proxy.%s]:\n%s", px.Name, res.TOML)
		}
	}
	for _, l := range strings.Split(string(res.TOML), "\n") {
		if strings.Contains(l, "[proxy.evil") && !strings.HasPrefix(strings.TrimSpace(l), "#") && !strings.Contains(l, `"`) {
			t.Errorf("line %q of the config came from the profile", l)
		}
	}
	for _, n := range res.Notes {
		if strings.ContainsFunc(n.Msg, func(r rune) bool { return r < 0x20 }) {
			t.Errorf("note %q holds a control character", n.Msg)
		}
	}
}
