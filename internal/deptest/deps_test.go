//go:build !windows

package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the import path of the module; the table names packages relative to it.
const module = "github.com/agentcage/router"

// table is, for every package of ours, what its code may import of ours (both platforms
// together) and what its tests may import besides. A package missing here fails the test:
// add its row, within the layers below.
var table = []struct{ pkg, imports, tests string }{
	// The decision: pure, and the config it is read from.
	{"rules", "internal/netaddr", ""},
	{"rules/policy", "conf internal/ports rules", "rules/policy/policytest"},
	{"rules/policy/policytest", "rules rules/policy", ""},
	{"rules/refusal", "rules/policy", ""},
	{"rules/modelapi", "", "internal/modeltest"},
	{"conf", "internal/secret rules rules/modelapi", "internal/winetest"},
	{"conf/lint", "conf internal/netaddr rules rules/policy windivert/adapters", "windivert/adapters/adapterstest"},
	{"conf/proxifier", "conf rules", "conf/lint rules/policy"},

	// The DNS side.
	{"dns/dnstest", "", ""},
	{"dns", "conf internal/accept internal/overbudget internal/ports internal/tally internal/window rules rules/refusal", "internal/clock/clocktest internal/overbudget/overbudgettest internal/syncbuf internal/wait"}, // rules: a query's Source carries the asking process as rules.Owner

	// The Linux data path and what it dials.
	{"router", "dns internal/accept internal/httphead internal/netaddr internal/tally router/ask router/auditlog router/broker router/broker/tlsca router/modelfwd router/sniff router/sockmap router/upload router/upstream router/upstream/socks5 rules rules/policy rules/refusal",
		"conf dns/dnstest internal/echotest internal/modeltest internal/overbudget internal/roottest internal/secret internal/syncbuf internal/wait router/upstream/socks5/socks5test router/upstream/upstreamtest rules/modelapi rules/policy/policytest"},
	// The model forwards' HTTP side: what the router hands an HTTP forward's connection.
	{"router/modelfwd", "internal/httphead internal/tally router/broker rules/modelapi rules/refusal", "internal/modeltest internal/netaddr internal/secret internal/syncbuf internal/wait"},
	{"router/upstream", "conf router/upstream/httpconnect router/upstream/socks4 router/upstream/socks5",
		"internal/echotest internal/winetest router/upstream/httpconnect/httpconnecttest router/upstream/socks4/socks4test router/upstream/socks5/socks5test router/upstream/upstreamtest"},
	{"router/upstream/upstreamtest", "router/upstream", ""},
	{"router/auditlog", "", "internal/winetest"},
	{"router/ask", "internal/overbudget", "internal/wait"},
	{"router/upload", "internal/overbudget internal/window", "internal/overbudget/overbudgettest"},
	{"cmd/router/console", "router/control", ""},
	{"router/upstream/socks5", "internal/secret", "internal/echotest internal/winetest router/upstream/socks5/socks5test"},
	{"router/upstream/socks5/socks5test", "", ""},
	{"router/upstream/socks4", "", ""},
	{"router/sniff", "", ""},
	{"router/broker", "internal/secret", ""},
	{"router/broker/tlsca", "", "internal/winetest"}, // the CA of the destinations whose TLS the router terminates: stdlib only
	{"router/upstream/socks4/socks4test", "", ""},
	{"router/upstream/httpconnect", "internal/secret", "internal/echotest router/upstream/httpconnect/httpconnecttest"},
	{"router/upstream/httpconnect/httpconnecttest", "", ""},
	{"router/nftcap", "internal/netaddr internal/ports router/nftcap/cagemark rules/policy rules/refusal", "internal/roottest internal/wait"},
	{"router/nftcap/nflog", "", "internal/roottest"},
	{"router/sockmap", "", "internal/roottest internal/wait"},
	{"router/nftcap/cagemark", "", "internal/roottest internal/wait"},
	{"router/proc", "rules", "internal/echotest internal/roottest router/proc/proctest"},
	{"router/proc/proctest", "router/proc", ""},
	{"router/nftcap/platform", "conf dns router router/capture router/control router/nftcap router/nftcap/cagemark router/nftcap/nflog router/proc rules rules/policy rules/refusal", "internal/syncbuf internal/wait"},

	// Operations: the wiring and what it serves.
	// The daemon knows the capture only through the seam (router/capture); its test of what
	// conf accepts also asks the Linux capture's spec.
	{"cmd/router/daemon", "cmd/router/console cmd/router/metrics conf dns internal/netaddr internal/overbudget router router/ask router/auditlog router/broker router/broker/tlsca router/capture router/control router/upload router/upstream rules rules/modelapi rules/policy rules/refusal",
		"internal/wait router/capture/capturetest router/nftcap/platform router/upstream/socks5"},
	// The seam between the daemon and a capture, and its fake.
	{"router/capture", "conf dns router/auditlog router/control rules rules/policy rules/refusal", ""},
	{"router/capture/capturetest", "conf dns router/capture rules rules/policy rules/refusal", ""},
	{"router/control", "internal/accept", ""},
	{"cmd/router/metrics", "router/control rules/refusal", ""},
	{"cmd/router/service", "windivert/dist", "internal/winetest"},

	// The Windows capture.
	{"windivert", "internal/netaddr internal/ports", "internal/winetest windivert/packet windivert/windiverttest"},
	{"windivert/windiverttest", "windivert", "internal/clock/clocktest"},
	{"windivert/packet", "", ""},
	{"windivert/redirect", "dns internal/clock router/auditlog rules rules/policy rules/refusal windivert windivert/packet",
		"conf dns/dnstest internal/clock/clocktest internal/echotest internal/wait internal/winetest router/proc rules/policy/policytest windivert/dist windivert/windiverttest"},
	{"windivert/wfp", "", "internal/winetest"},
	{"windivert/wfp/guard", "internal/ports windivert/wfp", "windivert/wfp/wfptest"},
	{"windivert/wfp/wfptest", "windivert/wfp", ""},
	{"windivert/adapters", "", "internal/winetest"},
	{"windivert/adapters/adapterstest", "windivert/adapters", ""},
	{"windivert/dist", "windivert", "internal/winetest"},
	{"windivert/platform", "conf dns internal/ports router/capture router/proc rules rules/policy rules/refusal windivert windivert/adapters windivert/redirect windivert/wfp windivert/wfp/guard",
		"internal/echotest internal/wait internal/winetest router router/auditlog router/capture/capturetest router/upstream router/upstream/socks5/socks5test rules/policy/policytest windivert/adapters/adapterstest windivert/packet windivert/wfp/wfptest windivert/windiverttest"},
	{"windivert/cmd/wdprobe", "router/proc windivert windivert/dist windivert/packet", ""},

	// The commands.
	{"cmd/router", "cmd/router/checkip cmd/router/learn cmd/router/proxycheck cmd/router/replay cmd/router/sdnotify conf conf/lint conf/proxifier internal/clock internal/progress router/auditlog router/broker/tlsca router/capture router/control cmd/router/daemon cmd/router/service router/nftcap/platform router/upstream rules rules/policy windivert/adapters windivert/platform",
		"router/upstream/socks5/socks5test rules/policy/policytest"},
	{"cmd/router/checkip", "", ""},
	{"cmd/router/sdnotify", "", ""},
	{"cmd/router/replay", "router/auditlog rules rules/policy", "conf"},
	{"cmd/router/learn", "router/auditlog", "conf conf/lint rules rules/policy"},
	{"cmd/router/proxycheck", "router/upstream router/upstream/httpconnect router/upstream/socks5", "router/upstream/httpconnect/httpconnecttest router/upstream/socks5/socks5test"},
	{"cmd/routerbench", "internal/bench internal/lab", ""},
	{"cmd/routerlab", "internal/lab", "conf conf/lint rules rules/policy"},

	// Shared helpers, test and bench support.
	{"internal/netaddr", "", ""},
	{"internal/httphead", "rules/modelapi", ""}, // the request-head reader of the model forwards and the brokered destinations
	{"internal/ports", "", ""},
	{"internal/accept", "", ""},
	{"internal/tally", "", "internal/syncbuf"},
	{"internal/secret", "", ""},
	{"internal/roottest", "", ""},
	{"internal/winetest", "", ""},
	{"internal/modeltest", "", ""},
	{"internal/wait", "", ""},
	{"internal/syncbuf", "", ""}, // the log sink tests and the lab read while goroutines write
	{"internal/echotest", "", "internal/winetest"},
	{"internal/lab", "internal/netaddr internal/syncbuf router/nftcap/cagemark", "internal/roottest internal/wait"},
	{"internal/bench", "router/upstream/socks5", "internal/wait router/upstream/socks5/socks5test"},
	{"internal/notices", "", ""},
	{"internal/progress", "internal/clock", "internal/clock/clocktest internal/syncbuf"},
	// The one clock interface of the packages that arm timers, and its fake.
	{"internal/clock", "", ""},
	{"internal/clock/clocktest", "", ""},
	// The one decision past a budget ([budget] over), for the DNS names' and the bytes up's.
	{"internal/overbudget", "", "internal/overbudget/overbudgettest"},
	{"internal/overbudget/overbudgettest", "internal/overbudget", ""},
	// The one windowed count per guest and domain, for the same two budgets.
	{"internal/window", "", ""},
	{"internal/deptest", "", ""},
	{"e2e", "", "conf dns internal/echotest internal/lab internal/modeltest internal/roottest internal/syncbuf internal/wait router router/control router/nftcap router/proc router/upstream router/upstream/socks5 rules rules/policy rules/refusal windivert/packet windivert/redirect"},
}

// A layer is a rule the table must keep, over the packages of ours that a package's code
// reaches (its imports, theirs, and so on; tests apart). bad names what pkg must not reach
// among reach; "" when the rule holds.
type layer struct {
	why string
	bad func(pkg string, reach []string) []string
}

// helpers are the small shared helpers under internal/, which import nothing of ours.
var helpers = []string{"internal/accept", "internal/netaddr", "internal/ports", "internal/secret", "internal/tally"}

var layers = []layer{
	{"rules decides from its input alone: it imports nothing of ours but internal/netaddr",
		only("rules", "internal/netaddr")},
	{"conf turns TOML into plain structs: it imports only rules, rules/modelapi (which import nothing of ours but netaddr) and the small shared helpers",
		only("conf", append([]string{"rules", "rules/modelapi"}, helpers...)...)},
	{"the wire packages speak their protocol and nothing else: they import nothing of ours but the one redaction",
		only("router/upstream/socks5", "internal/secret")},
	{"the wire packages speak their protocol and nothing else: they import nothing of ours but the one redaction",
		only("router/upstream/httpconnect", "internal/secret")},
	{"the wire packages speak their protocol and nothing else: they import nothing of ours but the one redaction",
		only("router/upstream/socks4", "internal/secret")},
	{"the name sniffer reads a client's untrusted first bytes and imports nothing of ours",
		only("router/sniff")},
	{"the Linux data path and its capture (nftables, the sockmap) import nothing of the Windows capture",
		never([]string{"router", "router/nftcap/...", "router/sockmap"}, "windivert/...")},
	{"the Windows capture imports nothing of the Linux capture",
		never([]string{"windivert/..."}, "router/nftcap/...", "router/sockmap")},
	{"the small shared helpers under internal/ import nothing of ours",
		func(p string, reach []string) []string {
			if slices.Contains(helpers, p) {
				return reach
			}
			return nil
		}},
	{"only the commands (cmd/) import both captures", bothOnlyInWiring},
	{"only the command (cmd/router and its packages) chooses a capture: nothing else imports a capture's platform",
		platformOnlyInCommand},
	{"the seam between the daemon and a capture imports no capture",
		never([]string{"router/capture/..."}, "router/nftcap/...", "router/sockmap", "windivert/...")},
	{"the daemon knows the capture only through the seam (router/capture): it imports no capture",
		never([]string{"cmd/router/daemon"}, "router/nftcap/...", "windivert/...")},
	{"dns answers names and knows nothing of the data path it serves",
		never([]string{"dns/..."}, "router", "router/...")},
}

// TestDeps lists the imports once and checks the table, the layers and the single-import
// rules against them.
func TestDeps(t *testing.T) {
	got := load(t)
	t.Run("table", func(t *testing.T) { checkTable(t, got) })
	t.Run("layers", func(t *testing.T) { checkLayers(t, got) })
	t.Run("edges", func(t *testing.T) { checkEdges(t, got) })
}

// checkTable checks the table against the code: every package has a row, and each row
// allows exactly what the package and its tests import of ours.
func checkTable(t *testing.T, got map[string]pkgImports) {
	rows := map[string]bool{}
	for _, r := range table {
		if rows[r.pkg] {
			t.Errorf("%s has two rows", r.pkg)
		}
		rows[r.pkg] = true
		p, ok := got[r.pkg]
		if !ok {
			t.Errorf("%s has a row but is no package of ours: remove its row", r.pkg)
			continue
		}
		imports, tests := strings.Fields(r.imports), strings.Fields(r.tests)
		for _, dep := range sorted(p.imports) {
			if !slices.Contains(imports, dep) {
				t.Errorf("%s imports %s, which its row does not allow: add it to the row if the layers allow it", r.pkg, dep)
			}
		}
		for _, dep := range sorted(p.tests) {
			if !slices.Contains(imports, dep) && !slices.Contains(tests, dep) {
				t.Errorf("%s's tests import %s, which its row does not allow: add it to the row's tests", r.pkg, dep)
			}
		}
		for _, dep := range imports {
			if !p.imports[dep] {
				t.Errorf("%s's row allows %s, which it no longer imports: remove it from the row", r.pkg, dep)
			}
		}
		for _, dep := range tests {
			if !p.tests[dep] || p.imports[dep] {
				t.Errorf("%s's row allows its tests %s, which they do not import (or the code does): remove it from the row's tests", r.pkg, dep)
			}
		}
	}
	for _, pkg := range sorted(keys(got)) {
		if !rows[pkg] {
			t.Errorf("%s has no row in the table of internal/deptest: add one, with what it imports of ours, within the layers", pkg)
		}
	}
}

// checkLayers checks each layer on what the code imports (which checkTable holds to the
// table), so that a row that breaks a layer fails with the layer's reason.
func checkLayers(t *testing.T, got map[string]pkgImports) {
	for _, pkg := range sorted(keys(got)) {
		reach := reachable(got, pkg)
		for _, l := range layers {
			if bad := l.bad(pkg, reach); len(bad) > 0 {
				t.Errorf("%s reaches %s: %s", pkg, strings.Join(bad, ", "), l.why)
			}
		}
	}
}

// checkEdges checks the two rules that bind single imports: nothing outside a command's
// directory (cmd/X, windivert/cmd/X) imports it, tests included, and test support (a
// package whose name ends in "test") is imported only by tests and by other test support.
func checkEdges(t *testing.T, got map[string]pkgImports) {
	for _, pkg := range sorted(keys(got)) {
		p := got[pkg]
		for _, dep := range sorted(union(p.imports, p.tests)) {
			if root := commandRoot(dep); root != "" && !within(pkg, root) {
				t.Errorf("%s imports %s: only %s itself may import a command's packages", pkg, dep, root)
			}
		}
		for _, dep := range sorted(p.imports) {
			if testSupport(dep) && !testSupport(pkg) {
				t.Errorf("%s imports %s in non-test code: test support is for tests", pkg, dep)
			}
		}
	}
}

// TestRulesSeeViolations feeds the layers and edge rules made-up imports that break them,
// so that a rule that always passes is caught.
func TestRulesSeeViolations(t *testing.T) {
	for _, tc := range []struct{ pkg, reaches string }{
		{"rules", "conf"},
		{"conf", "dns"},
		{"router/upstream/socks5", "internal/netaddr"},
		{"router/nftcap", "windivert/packet"},
		{"router", "windivert"},
		{"windivert/redirect", "router/sockmap"},
		{"router/proc", "router/nftcap windivert"},
		{"dns", "router/upstream"},
		{"internal/secret", "conf"},
		{"router", "router/nftcap/platform"},
		{"windivert/redirect", "windivert/platform"},
		{"router/capture", "router/nftcap"},
		{"router/capture/capturetest", "windivert/redirect"},
		{"cmd/router/daemon", "router/nftcap"},
		{"cmd/router/daemon", "windivert/wfp/guard"},
	} {
		caught := false
		for _, l := range layers {
			caught = caught || len(l.bad(tc.pkg, strings.Fields(tc.reaches))) > 0
		}
		if !caught {
			t.Errorf("%s reaching %s breaks no layer, want one broken", tc.pkg, tc.reaches)
		}
	}
	if commandRoot("cmd/router/checkip") != "cmd/router" || !within("cmd/router", "cmd/router") || within("router", "cmd/router") ||
		commandRoot("windivert/cmd/wdprobe") != "windivert/cmd/wdprobe" || commandRoot("router/control") != "" {
		t.Error("commandRoot or within is wrong")
	}
	if !testSupport("router/capture/capturetest") || !testSupport("internal/roottest") || testSupport("router/control") {
		t.Error("testSupport is wrong")
	}
}

// only binds pkg to reach no package of ours but allowed.
func only(pkg string, allowed ...string) func(string, []string) []string {
	return func(p string, reach []string) []string {
		if p != pkg {
			return nil
		}
		return reached(reach, func(d string) bool { return !slices.Contains(allowed, d) })
	}
}

// never binds the packages matching from to reach none matching forbidden. A pattern is a
// package, or a package and everything under it ("x/...").
func never(from []string, forbidden ...string) func(string, []string) []string {
	return func(p string, reach []string) []string {
		if !matchAny(from, p) {
			return nil
		}
		return reached(reach, func(d string) bool { return matchAny(forbidden, d) })
	}
}

// reached returns the packages of reach that bad says a package may not reach.
func reached(reach []string, bad func(d string) bool) []string {
	var out []string
	for _, d := range reach {
		if bad(d) {
			out = append(out, d)
		}
	}
	return out
}

func bothOnlyInWiring(p string, reach []string) []string {
	if within(p, "cmd") {
		return nil
	}
	var win, linux []string
	for _, d := range reach {
		switch {
		case matchAny([]string{"windivert/..."}, d):
			win = append(win, d)
		case matchAny([]string{"router/nftcap/...", "router/sockmap"}, d):
			linux = append(linux, d)
		}
	}
	if len(win) > 0 && len(linux) > 0 {
		return append(win, linux...)
	}
	return nil
}

// platforms are the captures' platforms, which the command alone constructs.
var platforms = []string{"router/nftcap/platform", "windivert/platform"}

func platformOnlyInCommand(p string, reach []string) []string {
	if within(p, "cmd/router") || matchAny(platforms, p) {
		return nil
	}
	return reached(reach, func(d string) bool { return matchAny(platforms, d) })
}

func matchAny(patterns []string, p string) bool {
	for _, pat := range patterns {
		if base, ok := strings.CutSuffix(pat, "/..."); ok && within(p, base) || p == pat {
			return true
		}
	}
	return false
}

// within reports whether p is dir or under it.
func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// commandRoot returns the command directory p is part of (cmd/X or any .../cmd/X), or "".
func commandRoot(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts[:len(parts)-1] {
		if s == "cmd" {
			return strings.Join(parts[:i+2], "/")
		}
	}
	return ""
}

// testSupport reports whether p is test support: its last element ends in "test" (the
// xxxtest fakes, internal/roottest, internal/winetest).
func testSupport(p string) bool {
	return strings.HasSuffix(p[strings.LastIndex(p, "/")+1:], "test") && p != "internal/deptest"
}

// pkgImports is what a package imports of ours, by the table's names: imports from its
// code, tests from its test files (itself left out), on either platform.
type pkgImports struct{ imports, tests map[string]bool }

// load lists the packages of ours with go list, for GOOS linux and windows, tests included.
func load(t *testing.T) map[string]pkgImports {
	t.Helper()
	got := map[string]pkgImports{}
	for _, goos := range []string{"linux", "windows"} {
		cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,Error", module+"/...")
		cmd.Env = append(os.Environ(), "GOOS="+goos)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GOOS=%s go list: %v\n%s", goos, err, stderr.Bytes())
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p struct {
				ImportPath                         string
				Imports, TestImports, XTestImports []string
				Error                              *struct{ Err string }
			}
			if err := dec.Decode(&p); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("GOOS=%s go list: decode: %v", goos, err)
			}
			if p.Error != nil && !strings.Contains(p.Error.Err, "build constraints exclude all Go files") {
				t.Fatalf("GOOS=%s go list: %s: %s", goos, p.ImportPath, p.Error.Err)
			}
			name := ours(p.ImportPath)
			e, ok := got[name]
			if !ok {
				e = pkgImports{imports: map[string]bool{}, tests: map[string]bool{}}
				got[name] = e
			}
			for _, imp := range p.Imports {
				if d := ours(imp); d != "" {
					e.imports[d] = true
				}
			}
			for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
				if d := ours(imp); d != "" && d != name {
					e.tests[d] = true
				}
			}
		}
	}
	if len(got) < 10 {
		t.Fatalf("go list found %d packages of ours, want them all", len(got))
	}
	return got
}

// ours returns the table's name of an import path of ours, or "" for any other.
func ours(path string) string {
	rest, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	return rest
}

// reachable returns the packages of ours that pkg's code reaches through imports (tests
// apart), on either platform.
func reachable(got map[string]pkgImports, pkg string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		for d := range got[p].imports {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(pkg)
	return sorted(seen)
}

func union(a, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func keys[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
