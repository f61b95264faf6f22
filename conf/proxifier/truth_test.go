package proxifier_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/conf/proxifier"
	"github.com/agentcage/router/rules/policy"
)

// sshProfile has a rule whose proxy the router cannot speak (SSH), for an app that no other
// rule names, above a Default direct rule.
const sshProfile = `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<ProxifierProfile version="102" platform="Windows" product_id="0" product_minver="400">
	<ProxyList>
		<Proxy id="100" type="SOCKS5">
			<Address>198.51.100.10</Address>
			<Port>1080</Port>
		</Proxy>
		<Proxy id="105" type="SSH">
			<Address>ssh.example.org</Address>
			<Port>22</Port>
		</Proxy>
	</ProxyList>
	<RuleList>
		<Rule enabled="true">
			<Name>Browsers</Name>
			<Applications>firefox.exe</Applications>
			<Action type="Proxy">100</Action>
		</Rule>
		<Rule enabled="true">
			<Name>Via SSH</Name>
			<Applications>putty.exe; winscp.exe</Applications>
			<Action type="Proxy">105</Action>
		</Rule>
		<Rule enabled="true">
			<Name>Default</Name>
			<Action type="Direct" />
		</Rule>
	</RuleList>
</ProxifierProfile>
`

// TestUncarriedProxyRuleStaysCaged: a proxy rule whose proxy the import cannot carry keeps
// its apps caged (its flows refused), never lets them fall to the Default direct rule, and
// the import says so at the rule's line.
func TestUncarriedProxyRuleStaysCaged(t *testing.T) {
	_, res, cfg := importProfile(t, "ssh.ppx", []byte(sshProfile), "ssh.ppx")
	pol := policy.New(cfg, policy.Env{})
	for _, app := range []string{"putty.exe", "winscp.exe"} {
		if got := routerVerdict(pol, app, "203.0.113.5", 22); got == "direct" {
			t.Errorf("%s: %s, want it caged (refused)\n%s", app, got, res.TOML)
		}
	}
	if got := routerVerdict(pol, "firefox.exe", "example.com", 443); got != "proxy proxy100" {
		t.Errorf("firefox.exe: %s, want proxy proxy100", got)
	}
	line := strings.Count(sshProfile[:strings.Index(sshProfile, "<Name>Via SSH")], "\n") // the <Rule> line
	found := false
	for _, n := range res.Notes {
		if n.Line == line && n.Kind == proxifier.NotCarried && strings.Contains(n.Msg, "block") {
			found = true
		}
	}
	if !found {
		t.Errorf("no note at line %d says the rule is carried as a block rule: %v", line, res.Notes)
	}
}

// bigProfile is a profile of about size bytes: one direct rule with that many distinct
// targets (names and addresses), then a Default rule.
func bigProfile(size int) []byte {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<ProxifierProfile version="102" platform="Windows">
<RuleList>
<Rule enabled="true"><Name>Many</Name><Targets>`)
	for i := 0; b.Len() < size-200; i++ {
		if i%2 == 0 {
			fmt.Fprintf(&b, "host%d.example.com; ", i)
		} else {
			fmt.Fprintf(&b, "10.%d.%d.%d; ", i>>16&255, i>>8&255, i&255)
		}
	}
	b.WriteString(`</Targets><Action type="Block" /></Rule>
<Rule enabled="true"><Name>Default</Name><Action type="Direct" /></Rule>
</RuleList>
</ProxifierProfile>
`)
	return []byte(b.String())
}

// importTime is the least CPU time of three imports (Parse and Convert) of data, each
// after a garbage collection.
func importTime(t *testing.T, data []byte) time.Duration {
	t.Helper()
	best := time.Duration(1<<63 - 1)
	for range 3 {
		runtime.GC()
		start := cpuTime()
		p, err := proxifier.Parse("big.ppx", data)
		if err != nil {
			t.Fatal(err)
		}
		proxifier.Convert(p, proxifier.Options{})
		best = min(best, cpuTime()-start)
	}
	return best
}

// TestImportLinear: the import's time grows linearly with the profile (a profile four times
// as large takes about four times the CPU time; quadratic would be sixteen): judged on the
// ratio with a wide margin, not on a figure of this machine. The largest profile the import reads
// is timed and logged.
func TestImportLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("imports profiles of several MiB")
	}
	size := 512 << 10
	if raceOn {
		size = 64 << 10
	}
	small, large := bigProfile(size), bigProfile(4*size)
	ts, tl := importTime(t, small), importTime(t, large)
	ratio := float64(tl) / float64(ts)
	t.Logf("%d KiB in %v, %d KiB in %v: x%.1f", len(small)>>10, ts, len(large)>>10, tl, ratio)
	if ratio > 8 {
		t.Errorf("4 times the profile took %.1f times as long: the import is not linear", ratio)
	}
	if raceOn {
		return
	}
	limit := bigProfile(proxifier.MaxSize - 1024)
	start := time.Now()
	p, err := proxifier.Parse("limit.ppx", limit)
	if err != nil {
		t.Fatal(err)
	}
	res := proxifier.Convert(p, proxifier.Options{})
	t.Logf("a %d KiB profile (%d targets) imported in %v", len(limit)>>10, len(p.Rules[0].Targets.Items), time.Since(start))
	if len(res.TOML) == 0 {
		t.Fatal("no config")
	}
}
