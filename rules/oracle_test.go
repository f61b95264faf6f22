package rules

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"
)

// gen draws rules and flows from small domains so that rules overlap and flows match often:
// the compiled Table must agree with Linear on every one.
type gen struct {
	r *rand.Rand
}

var (
	genNames = []string{"example.com", "a.example.com", "b.a.example.com", "lab.test", "echo.lab.test", "localhost", "api.openai.com", "openai.com", "x.y", "bücher.example", "straße.bücher.example"}
	genApps  = []string{"VirtualBoxVM.exe", "VBoxHeadless.exe", "vmnat.exe", "svchost.exe", "curl", "qemu-system-x86_64", "qemu-img", "firefox", "Ünïcode.exe", "\u212Aurl"}
	genPaths = []string{`C:\Program Files\Oracle\VirtualBox\VBoxHeadless.exe`, `C:\Windows\System32\svchost.exe`, "/usr/bin/qemu-system-x86_64", "/usr/bin/curl", `D:\Spiele\ÜNÏCODE.EXE`, "/opt/Mixed/Case/Curl", ""}
	genSvcs  = []string{"iphlpsvc", "SharedAccess", "Dnscache", "BFE", "Dienst\u212A"}
)

func (g *gen) addr() netip.Addr {
	if g.r.IntN(4) == 0 {
		return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(g.r.IntN(8))})
	}
	return netip.AddrFrom4([4]byte{10, 0, byte(g.r.IntN(4)), byte(g.r.IntN(16))})
}

func (g *gen) ipRange() IPRange {
	if g.r.IntN(20) == 0 { // IPv6 ranges whose keys hold the IPv4 addresses' (the table's band)
		return RangeOfPrefix(netip.MustParsePrefix([]string{"::/0", "::/80", "::ffff:0:0/96", "::ffff:10.0.0.0/120"}[g.r.IntN(4)]))
	}
	a := g.addr()
	switch g.r.IntN(3) {
	case 0:
		return IPRange{a, a}
	case 1:
		bits := a.BitLen() - g.r.IntN(6)
		return RangeOfPrefix(netip.PrefixFrom(a, bits).Masked())
	}
	b := a
	for range g.r.IntN(10) {
		b = b.Next()
	}
	return IPRange{a, b}
}

func (g *gen) port() uint16 { return uint16(1 + g.r.IntN(12)) }

func (g *gen) rule(i int) Rule {
	r := Rule{Name: fmt.Sprint("r", i), Action: Action(g.r.IntN(3))}
	if g.r.IntN(6) == 0 {
		r.Network = Network(1 + g.r.IntN(2))
	}
	r.Caged = g.r.IntN(5) == 0
	r.Disabled = g.r.IntN(8) == 0
	for range g.few() {
		r.Sources = append(r.Sources, g.ipRange())
	}
	for range g.few() {
		switch g.r.IntN(3) {
		case 0:
			r.Hosts = append(r.Hosts, Host{Kind: HostRange, Range: g.ipRange()})
		case 1:
			r.Hosts = append(r.Hosts, Host{Kind: HostName, Name: genNames[g.r.IntN(len(genNames))]})
		case 2:
			r.Hosts = append(r.Hosts, Host{Kind: HostSuffix, Name: genNames[g.r.IntN(len(genNames))]})
		}
	}
	for range g.few() {
		lo := g.port()
		r.Ports = append(r.Ports, PortRange{lo, lo + uint16(g.r.IntN(3))})
	}
	for range g.few() {
		var p string
		switch g.r.IntN(4) {
		case 0:
			p = genApps[g.r.IntN(len(genApps))][:3] + "*"
		case 1:
			p = genPaths[g.r.IntN(len(genPaths)-1)]
		case 2:
			p = strings.ToUpper(genApps[g.r.IntN(len(genApps))])
		default:
			p = genApps[g.r.IntN(len(genApps))]
		}
		r.Apps = append(r.Apps, MustApp(p))
	}
	for range g.few() {
		s, _ := ParseService(genSvcs[g.r.IntN(len(genSvcs))])
		r.Services = append(r.Services, s)
	}
	return r
}

// few is mostly 0 (field open), sometimes 1-2 entries.
func (g *gen) few() int {
	if g.r.IntN(3) != 0 {
		return 0
	}
	return 1 + g.r.IntN(2)
}

func (g *gen) query() *Query {
	q := &Query{Network: Network(g.r.IntN(3)), Port: g.port(), Caged: g.r.IntN(2) == 0}
	if g.r.IntN(5) != 0 {
		q.Src = g.addr()
	}
	if g.r.IntN(5) != 0 {
		q.Dst = g.addr()
		if g.r.IntN(8) == 0 {
			q.Dst = netip.AddrFrom16(q.Dst.As16()) // IPv4-mapped
		}
	}
	if g.r.IntN(2) == 0 {
		q.Host = genNames[g.r.IntN(len(genNames))]
		if g.r.IntN(4) == 0 {
			q.Host = "sub." + strings.ToUpper(q.Host) + "."
		}
	}
	switch g.r.IntN(3) {
	case 0:
		q.App = genApps[g.r.IntN(len(genApps))]
	case 1:
		q.AppPath = genPaths[g.r.IntN(len(genPaths))]
	}
	for range g.r.IntN(3) {
		sv := genSvcs[g.r.IntN(len(genSvcs))]
		if g.r.IntN(3) == 0 {
			sv = strings.ToUpper(sv)
		}
		q.Services = append(q.Services, sv)
	}
	return q
}

func TestTableAgreesWithLinear(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	g := &gen{rand.New(rand.NewPCG(seed, 7))}
	const sets, queries = 300, 300
	for s := range sets {
		n := 1 + g.r.IntN(150)
		if s%50 == 0 {
			n = 1000 + g.r.IntN(500) // large enough for dense sets
		}
		rs := make([]Rule, n)
		for i := range rs {
			rs[i] = g.rule(i)
		}
		table := Compile(rs)
		for range queries {
			q := g.query()
			got, want := table.Decide(q), Linear(rs, q)
			if got != want {
				t.Fatalf("seed %d, set %d (%d rules): query %+v: table %+v, linear %+v", seed, s, n, *q, got, want)
			}
		}
	}
}

// FuzzDecide checks that the Table agrees with Linear on fuzzed rule sets and flows.
func FuzzDecide(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(10))
	f.Add(uint64(99), uint64(3), uint8(200))
	f.Fuzz(func(t *testing.T, a, b uint64, n uint8) {
		g := &gen{rand.New(rand.NewPCG(a, b))}
		rs := make([]Rule, int(n)+1)
		for i := range rs {
			rs[i] = g.rule(i)
		}
		table := Compile(rs)
		for range 20 {
			q := g.query()
			if got, want := table.Decide(q), Linear(rs, q); got != want {
				t.Fatalf("query %+v: table %+v, linear %+v", *q, got, want)
			}
		}
	})
}

// FuzzParse feeds arbitrary text to every entry parser: no panic, and what parses prints back
// to something that parses to the same value.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"10.0.2.2", "10.0.2.0/24", "a-b", "10.0.0.1-10.0.0.2", "*.example.com", "::1", "fe80::/10", "8000-9000", "443", `C:\x\*`, "qemu-*", "iphlpsvc", "", "-", "/", "*.", "1.2.3.4/-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if h, err := ParseHost(s); err == nil {
			h2, err := ParseHost(h.String())
			if err != nil || h2 != h {
				t.Fatalf("ParseHost(%q) = %v; reparse of %q = %v, %v", s, h, h.String(), h2, err)
			}
		}
		if p, err := ParsePorts(s); err == nil {
			if p2, err := ParsePorts(p.String()); err != nil || p2 != p {
				t.Fatalf("ParsePorts(%q) = %v; reparse = %v, %v", s, p, p2, err)
			}
		}
		if a, err := ParseApp(s); err == nil {
			a.match("x", "/x")
		}
		ParseService(s)
	})
}

// benchRules builds n rules shaped like real ones (a few fields each, host addresses and
// names, ports, app names) ending in a catch-all, and flows of which most fall through to the
// end: the slow case for a first-match engine.
func benchRules(n int) ([]Rule, []*Query) {
	r := rand.New(rand.NewPCG(1, uint64(n)))
	rs := make([]Rule, 0, n)
	for i := range n - 1 {
		var rl Rule
		rl.Name = fmt.Sprint("rule-", i)
		rl.Action = Action(i % 3)
		switch i % 5 {
		case 0:
			rl.Hosts = []Host{{Kind: HostRange, Range: RangeOfPrefix(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24))}}
			rl.Ports = []PortRange{{uint16(1000 + i%500), uint16(1000 + i%500)}}
		case 1:
			rl.Hosts = []Host{{Kind: HostSuffix, Name: fmt.Sprintf("svc%d.example.com", i)}}
		case 2:
			rl.Apps = []App{MustApp(fmt.Sprintf("app%d.exe", i))}
			rl.Ports = []PortRange{{443, 443}}
		case 3:
			rl.Sources = []IPRange{RangeOfPrefix(netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)}), 32))}
			rl.Network = UDP
		case 4:
			a := netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)})
			rl.Hosts = []Host{{Kind: HostRange, Range: IPRange{a, a}}, {Kind: HostName, Name: fmt.Sprintf("h%d.lab.test", i)}}
			rl.Apps = []App{MustApp("qemu-system-*")}
		}
		rs = append(rs, rl)
	}
	rs = append(rs, Rule{Name: "default", Action: Direct})
	var qs []*Query
	for i := range 1024 {
		q := &Query{
			Network: TCP,
			Src:     netip.AddrFrom4([4]byte{10, 0, 2, byte(15 + r.IntN(5))}),
			Dst:     netip.AddrFrom4([4]byte{203, 0, 113, byte(r.IntN(256))}),
			Port:    uint16(r.IntN(65535) + 1),
			Owner:   Owner{App: "VBoxHeadless.exe"},
		}
		if i%4 == 0 {
			q.Host = fmt.Sprintf("svc%d.example.com", r.IntN(2*n))
		}
		if i%8 == 0 {
			q.Dst = netip.AddrFrom4([4]byte{10, byte(r.IntN(n) >> 8), byte(r.IntN(n)), 9})
			q.Port = uint16(1000 + r.IntN(500))
		}
		qs = append(qs, q)
	}
	return rs, qs
}

// BenchmarkDecide prints the compiled Table and the naive linear matcher side by side for
// 10, 1,000 and 10,000 rules, with p50/p99 of single decisions as extra metrics (every fourth
// decision is timed alone; the figures include the ~20-40 ns of reading the clock). The
// timed decisions are always the same quarter of benchRules' 1,024 flows, the ones with a
// name (every fourth), half of them to an address and port that rules list: the slower
// flows, so p50 and p99 are theirs and higher than ns/op, the mean over all flows.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		rs, qs := benchRules(n)
		table := Compile(rs)
		for _, m := range []struct {
			name   string
			decide func(*Query) Verdict
		}{
			{"table", table.Decide},
			{"linear", func(q *Query) Verdict { return Linear(rs, q) }},
		} {
			b.Run(fmt.Sprintf("rules=%d/%s", n, m.name), func(b *testing.B) {
				lat := make([]time.Duration, 0, 100000)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					q := qs[i%len(qs)]
					if len(lat) < cap(lat) && i%4 == 0 {
						t0 := time.Now()
						m.decide(q)
						lat = append(lat, time.Since(t0))
						continue
					}
					m.decide(q)
				}
				b.StopTimer()
				if len(lat) > 0 {
					sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
					b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
					b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
				}
			})
		}
	}
}

func TestBenchRulesAgree(t *testing.T) {
	for _, n := range []int{10, 1000} {
		rs, qs := benchRules(n)
		table := Compile(rs)
		for _, q := range qs {
			if got, want := table.Decide(q), Linear(rs, q); got != want {
				t.Fatalf("n=%d query %+v: table %+v, linear %+v", n, *q, got, want)
			}
		}
	}
}

// TestTableOrder: the first matching rule wins across the table's indexes: rules of
// different shapes (the fields they constrain), overlapping prefixes and port ranges, names
// and suffixes in any case, a key many rules share (a dense set) and short lists.
func TestTableOrder(t *testing.T) {
	specs := []string{}
	for i := range 10 {
		specs = append(specs, fmt.Sprintf("fill-%d block ports=443 apps=filler-%d", i, i))
	}
	specs = append(specs,
		"v6-all block hosts=::/0 ports=9", // its keys span the IPv4 addresses' too
		"v4-low block hosts=0.0.0.0/8",
		"v4-high block hosts=255.255.255.0/24 ports=9",
		"suffix-443 proxy exit hosts=*.example.com ports=443",
		"ten block hosts=10.0.0.0/8",
		"ports-400 direct ports=400-500",
		"ten-one block hosts=10.1.0.0/16 ports=440-450",
		"curl-443 block apps=curl ports=443",
		"exact direct hosts=a.example.com",
		"lab proxy exit hosts=*.lab.test,10.1.2.0/24 ports=22,8000-8999",
	)
	for i := range 200 { // enough rules for the shared keys to be dense and others short
		specs = append(specs, fmt.Sprintf("late-%d block hosts=h%d.lab.test,11.9.%d.0/24 ports=%d", i, i, i, 1000+i))
	}
	specs = append(specs, "default direct")
	rs := ruleSet(t, specs...)
	table := Compile(rs)
	for _, tc := range []struct{ q, want string }{
		{"net=tcp host=x.example.com dst=10.1.2.3 port=443 app=curl", "suffix-443"},
		{"net=tcp dst=10.1.2.3 port=445", "ten"},
		{"net=tcp dst=11.0.0.1 port=450", "ports-400"},
		{"net=tcp host=a.example.com port=80", "exact"},
		{"net=tcp host=A.Example.COM. port=443 app=CURL", "suffix-443"},
		{"net=tcp dst=10.1.2.3 port=443 app=filler-3", "fill-3"},
		{"net=tcp dst=192.0.2.1 port=443 app=Filler-9", "fill-9"},
		{"net=tcp dst=192.0.2.1 port=443 app=curl", "ports-400"},
		{"net=tcp dst=192.0.2.1 port=80 app=curl", "default"},
		{"net=tcp host=www.LAB.test port=8080", "lab"},
		{"net=tcp host=H7.lab.test port=1007", "late-7"},
		{"net=tcp host=h7.lab.test port=1008", "default"},
		{"net=tcp dst=11.9.7.1 port=1007", "late-7"},
		{"net=tcp dst=11.9.7.1 port=1008", "default"},
		{"net=tcp dst=11.9.8.1 host=h7.lab.test port=1008", "late-8"},
		{"net=tcp dst=192.0.2.1 port=22", "default"},
		{"net=tcp dst=10.0.0.1 port=9", "ten"},
		{"net=tcp dst=::ffff:10.0.0.1 port=9", "ten"},
		{"net=tcp dst=2001:db8::1 port=9", "v6-all"},
		{"net=tcp dst=::ffff:ffff port=9", "v6-all"},
		{"net=tcp dst=0.0.0.1 port=80", "v4-low"},
		{"net=tcp dst=255.255.255.255 port=9", "v4-high"},
		{"net=tcp dst=255.255.255.255 port=10", "default"},
		{"net=tcp dst=::1:0:0:0 port=10", "default"},
		{"net=tcp dst=10.1.2.200 port=22", "ten"},
	} {
		q := query(t, tc.q)
		got, want := table.Decide(q), Linear(rs, q)
		if got != want || got.Name != tc.want {
			t.Errorf("%s: table %q, linear %q, want %q", tc.q, got.Name, want.Name, tc.want)
		}
	}
}
