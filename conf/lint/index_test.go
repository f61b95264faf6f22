package lint

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/netaddr"
)

// genRules returns a config of n rules in the forms real ones take (names, suffixes, CIDRs,
// ports, apps, sources, caged, networks, every action), with here and there a rule that an
// earlier one shadows in part or whole, and a catch-all last.
func genRules(n int) string {
	var b strings.Builder
	b.WriteString("[proxy.exit]\naddress = \"198.51.100.1:1080\"\n[proxy.alt]\naddress = \"198.51.100.2:1080\"\n[dns]\nproxy = \"exit\"\n[capture]\nvm_networks = [\"10.0.2.0/24\"]\nlocal = true\n")
	actions := []string{"action = \"direct\"", "action = \"proxy\"\nproxy = \"exit\"", "action = \"block\"", "action = \"proxy\"\nproxy = \"alt\""}
	for i := range n - 1 {
		fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\n%s\n", i, actions[i*7%len(actions)])
		switch i % 8 {
		case 0:
			fmt.Fprintf(&b, "hosts = [\"h%d.example.com\", \"*.s%d.example.net\"]\nports = [443, \"8000-8100\"]\n", i, i)
		case 1:
			fmt.Fprintf(&b, "hosts = [\"10.%d.%d.0/24\"]\nnetwork = \"tcp\"\n", i>>8&255, i&255)
		case 2:
			fmt.Fprintf(&b, "apps = [\"app%d\"]\nhosts = [\"203.0.%d.%d\"]\n", i, i>>8&255, i&255)
		case 3:
			fmt.Fprintf(&b, "sources = [\"10.0.2.%d\"]\nports = [%d]\n", i%250+1, i%60000+1)
		case 4:
			fmt.Fprintf(&b, "hosts = [\"h%d.example.com\"]\n", i-4) // inside rule i-4: unreachable or partly shadowed
		case 5:
			fmt.Fprintf(&b, "caged = true\nhosts = [\"*.c%d.example.org\"]\nports = [%d]\n", i, i%60000+1)
		case 6:
			fmt.Fprintf(&b, "hosts = [\"10.%d.%d.128/25\"]\nnetwork = \"tcp\"\nports = [22]\n", (i-5)>>8&255, (i-5)&255) // inside rule i-5
		case 7:
			fmt.Fprintf(&b, "network = \"udp\"\nhosts = [\"2001:db8:%x::/48\"]\nports = [\"1-1024\"]\n", i)
		}
	}
	b.WriteString("[[rule]]\nname = \"default\"\naction = \"direct\"\n")
	return b.String()
}

func genConfig(t testing.TB, n int) *conf.Config {
	t.Helper()
	cfg, err := conf.Parse("gen.toml", []byte(genRules(n)), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCheckScales: Check over 1k, 5k and 20k generated rules (5k at most under the race
// detector) takes time about linear in them: the time per rule at the most is within a
// generous factor of that at 1k (comparing each rule with every earlier one made it 20
// times that and more, and 1k rules took 40 s).
func TestCheckScales(t *testing.T) {
	sizes := []int{1000, 5000, 20000}
	if raceOn {
		sizes = sizes[:2]
	}
	var perRule []time.Duration
	for _, n := range sizes {
		cfg := genConfig(t, n)
		start := time.Now()
		fs := Check(cfg, Host{OS: "linux"})
		took := time.Since(start)
		perRule = append(perRule, took/time.Duration(n))
		t.Logf("%d rules: %v (%v a rule), %d findings", n, took.Round(time.Millisecond), perRule[len(perRule)-1], len(fs))
		if n == 1000 && len(fs) != 125 {
			t.Errorf("1000 rules: %d findings, want 125 (as comparing with every earlier rule finds)", len(fs))
		}
	}
	if last := perRule[len(perRule)-1]; last > 6*perRule[0]+50*time.Microsecond {
		t.Errorf("the time per rule grows with the number of rules: %v at %d, %v at %d", perRule[0], sizes[0], last, sizes[len(sizes)-1])
	}
}

// TestIndexFindsWhatEveryRuleFinds: on random rule lists, Check with the index finds
// exactly what comparing each rule with every earlier one finds (the index only skips rules
// that cannot meet), findings and messages alike.
func TestIndexFindsWhatEveryRuleFinds(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 5))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	some := func(xs ...string) string {
		var out []string
		for range 1 + r.IntN(3) {
			out = append(out, strconv.Quote(pick(xs...)))
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	hosts := []string{"a.test", "b.a.test", "c.b.a.test", "x.test", "other.org", "*.test", "*.a.test", "*.b.a.test", "*.org",
		"203.0.113.0/24", "203.0.113.0/25", "203.0.113.7", "203.0.113.5-203.0.113.200", "2001:db8::/32", "2001:db8::1",
		"127.0.0.1", "localhost", "myhost", "192.168.1.20", "10.0.2.2", "0.0.0.0/0"}
	apps := []string{"qemu-*", "qemu-system-*", "QEMU-IMG", "qemu-img", "curl", "*", "*.exe", "vbox.exe", "VBox?.exe",
		"/usr/bin/qemu-*", "/usr/bin/curl", `C:\Tools\curl.exe`, "VirtualBoxVM.exe", "passt"}
	nf, counts := 0, map[string]int{}
	for set := range 300 {
		goos := pick("linux", "windows")
		var b strings.Builder
		b.WriteString("[proxy.exit]\naddress = \"198.51.100.1:1080\"\n[proxy.alt]\naddress = \"198.51.100.2:1080\"\n[dns]\nproxy = \"exit\"\n[capture]\nlocal = true\nvm_networks = [\"10.0.2.0/24\"]\n")
		if r.IntN(2) == 0 {
			fmt.Fprintf(&b, "hypervisors = [%q]\n", pick("qemu", "virtualbox", "vmware"))
		}
		for i := range 2 + r.IntN(40) {
			fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\n", i)
			switch r.IntN(4) {
			case 0:
				b.WriteString("action = \"direct\"\n")
			case 1:
				b.WriteString("action = \"block\"\n")
			case 2:
				b.WriteString("action = \"proxy\"\nproxy = \"exit\"\n")
			case 3:
				b.WriteString("action = \"proxy\"\nproxy = \"alt\"\n")
			}
			if r.IntN(4) == 0 {
				fmt.Fprintf(&b, "network = %q\n", pick("tcp", "udp"))
			}
			if r.IntN(3) == 0 {
				fmt.Fprintf(&b, "sources = %s\n", some("10.0.2.0/24", "10.0.2.0/25", "10.0.2.128/25", "10.0.3.0/24", "10.0.2.7"))
			}
			if r.IntN(3) != 0 {
				fmt.Fprintf(&b, "hosts = %s\n", some(hosts...))
			}
			if r.IntN(2) == 0 {
				fmt.Fprintf(&b, "ports = %s\n", some("80", "443", "1-500", "400-65535", "1-65535", "47831"))
			}
			if r.IntN(3) == 0 {
				fmt.Fprintf(&b, "apps = %s\n", some(apps...))
			}
			if r.IntN(6) == 0 {
				fmt.Fprintf(&b, "services = %s\n", some("iphlpsvc", "bfe"))
			}
			if r.IntN(6) == 0 {
				b.WriteString("caged = true\n")
			}
		}
		cfg, err := conf.Parse("t.toml", []byte(b.String()), conf.Options{SkipSecrets: true, OS: goos})
		if err != nil {
			t.Logf("refused: %v", err)
			continue // a random list may repeat itself where conf refuses it
		}
		h := Host{Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.20")}, Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")}, Name: "myhost", OS: goos}
		got, want := check(cfg, h, false), check(cfg, h, true)
		nf += len(got)
		for _, f := range got {
			counts[f.Check]++
		}
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d set %d: with the index\n%s\nwithout\n%s\nconfig:\n%s", seed, set, fmtFindings(got), fmtFindings(want), b.String())
		}
	}
	t.Logf("%d findings: %v", nf, counts)
}

func fmtFindings(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %+v\n", f)
	}
	return b.String()
}

// TestMeets: meets answers what intersect(...).empty() answers, on random interval sets.
func TestMeets(t *testing.T) {
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	set := func() *ivset {
		s := &ivset{}
		for range r.IntN(4) {
			lo := uint64(r.IntN(40))
			s.add(iv{netaddr.Key{Lo: lo}, netaddr.Key{Lo: lo + uint64(r.IntN(8))}})
		}
		return s
	}
	for range 20000 {
		a, b := set(), set()
		if got, want := a.meets(b), !a.intersect(b).empty(); got != want {
			t.Fatalf("%v meets %v = %v, want %v", a.ivs, b.ivs, got, want)
		}
	}
}
