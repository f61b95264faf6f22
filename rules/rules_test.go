package rules

import (
	"net/netip"
	"strings"
	"testing"
)

// rule builds a Rule from config-like text: "name action [proxy] field=a,b field=c".
func rule(t testing.TB, spec string) Rule {
	t.Helper()
	words := strings.Fields(spec)
	r := Rule{Name: words[0]}
	act, ok := ParseAction(words[1])
	if !ok {
		t.Fatalf("bad action in %q", spec)
	}
	r.Action = act
	for _, w := range words[2:] {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			r.Proxy = w
			continue
		}
		for _, e := range strings.Split(v, ",") {
			var err error
			switch k {
			case "network":
				var ok bool
				if r.Network, ok = ParseNetwork(e); !ok {
					t.Fatalf("bad network %q", e)
				}
			case "sources":
				var s IPRange
				s, err = ParseIPRange(e)
				r.Sources = append(r.Sources, s)
			case "hosts":
				var h Host
				h, err = ParseHost(e)
				r.Hosts = append(r.Hosts, h)
			case "ports":
				var p PortRange
				p, err = ParsePorts(e)
				r.Ports = append(r.Ports, p)
			case "apps":
				var a App
				a, err = ParseApp(strings.ReplaceAll(e, "_SP_", " "))
				r.Apps = append(r.Apps, a)
			case "services":
				var s string
				s, err = ParseService(e)
				r.Services = append(r.Services, s)
			default:
				t.Fatalf("bad field %q", k)
			}
			if err != nil {
				t.Fatalf("%s: %v", spec, err)
			}
		}
	}
	return r
}

func ruleSet(t testing.TB, specs ...string) []Rule {
	var rs []Rule
	for _, s := range specs {
		rs = append(rs, rule(t, s))
	}
	return rs
}

// query builds a Query from "key=value" words.
func query(t testing.TB, spec string) *Query {
	t.Helper()
	q := &Query{}
	for _, w := range strings.Fields(spec) {
		k, v, _ := strings.Cut(w, "=")
		switch k {
		case "net":
			q.Network, _ = ParseNetwork(v)
		case "src":
			q.Src = netip.MustParseAddr(v)
		case "dst":
			q.Dst = netip.MustParseAddr(v)
		case "port":
			p, err := ParsePorts(v)
			if err != nil {
				t.Fatal(err)
			}
			q.Port = p.Lo
		case "host":
			q.Host = v
		case "app":
			q.App = v
		case "path":
			q.AppPath = strings.ReplaceAll(v, "_SP_", " ")
		case "svc":
			q.Services = strings.Split(v, ",")
		default:
			t.Fatalf("bad query key %q", k)
		}
	}
	return q
}

func TestMatchFields(t *testing.T) {
	tests := []struct {
		rule  string
		query string
		want  string // "" for a match, else the failing field
	}{
		// No fields: matches everything, even an empty flow.
		{"all direct", "", ""},
		{"all direct", "net=tcp dst=203.0.113.1 port=443", ""},
		// network
		{"r block network=udp", "net=udp", ""},
		{"r block network=udp", "net=tcp", "network"},
		{"r block network=udp", "", "network"},
		// sources: CIDR, single address, range, IPv6, mapped
		{"r direct sources=10.0.2.0/24", "src=10.0.2.15", ""},
		{"r direct sources=10.0.2.0/24", "src=10.0.3.15", "sources"},
		{"r direct sources=10.0.2.0/24", "src=::ffff:10.0.2.15", ""},
		{"r direct sources=10.0.2.0/24", "", "sources"},
		{"r direct sources=10.0.2.15", "src=10.0.2.15", ""},
		{"r direct sources=10.0.2.10-10.0.2.20", "src=10.0.2.20", ""},
		{"r direct sources=10.0.2.10-10.0.2.20", "src=10.0.2.21", "sources"},
		{"r direct sources=fd00::/64", "src=fd00::5", ""},
		{"r direct sources=fd00::/64", "src=fd00:0:0:1::5", "sources"},
		{"r direct sources=::/0", "src=10.0.0.1", "sources"}, // families never mix
		{"r direct sources=0.0.0.0/0", "src=::1", "sources"},
		// hosts: addresses
		{"r direct hosts=10.0.2.2,127.0.0.1", "dst=127.0.0.1", ""},
		{"r direct hosts=10.0.2.2,127.0.0.1", "dst=127.0.0.2", "hosts"},
		{"r direct hosts=192.168.56.0/24", "dst=192.168.56.255", ""},
		{"r direct hosts=10.0.0.0-10.255.255.255", "dst=10.1.2.3", ""},
		{"r direct hosts=10.0.0.0-10.255.255.255", "dst=11.0.0.0", "hosts"},
		{"r direct hosts=::1", "dst=::1", ""},
		{"r direct hosts=2001:db8::/32", "dst=2001:db8:ffff::1", ""},
		{"r direct hosts=2001:db8::1-2001:db8::9", "dst=2001:db8::a", "hosts"},
		// hosts: names are case-insensitive, trailing dot ignored, need a known name
		{"r direct hosts=localhost", "host=localhost dst=127.0.0.1", ""},
		{"r direct hosts=localhost", "host=LocalHost.", ""},
		{"r direct hosts=localhost", "dst=127.0.0.1", "hosts"},
		{"r direct hosts=api.openai.com", "host=api.openai.com", ""},
		{"r direct hosts=api.openai.com", "host=x.api.openai.com", "hosts"},
		// hosts: *.suffix matches strict subdomains on label boundaries
		{"r direct hosts=*.example.com", "host=a.example.com", ""},
		{"r direct hosts=*.example.com", "host=a.b.EXAMPLE.com", ""},
		{"r direct hosts=*.example.com", "host=example.com", "hosts"},
		{"r direct hosts=*.example.com", "host=badexample.com", "hosts"},
		{"r direct hosts=*.local", "host=printer.local", ""},
		// hosts: OR of addresses and names
		{"r direct hosts=10.0.2.2,*.lab.test", "dst=203.0.113.1 host=echo.lab.test", ""},
		{"r direct hosts=10.0.2.2,*.lab.test", "dst=10.0.2.2 host=other.test", ""},
		// ports
		{"r direct ports=47831", "port=47831", ""},
		{"r direct ports=47831", "port=47832", "ports"},
		{"r direct ports=8000-9000,443", "port=9000", ""},
		{"r direct ports=8000-9000,443", "port=443", ""},
		{"r direct ports=8000-9000,443", "port=7999", "ports"},
		{"r direct ports=1-65535", "port=65535", ""},
		// apps: case-insensitive, globs, name or full path
		{"r proxy x apps=VirtualBoxVM.exe", "app=virtualboxvm.exe", ""},
		{"r proxy x apps=VirtualBoxVM.exe", "app=VirtualBox.exe", "apps"},
		{"r proxy x apps=qemu-system-*", "app=qemu-system-x86_64", ""},
		{"r proxy x apps=qemu-system-*", "app=qemu-img", "apps"},
		{"r proxy x apps=vbox?eadless", "app=VBoxHeadless", ""},
		{"r proxy x apps=*", "app=anything", ""},
		{"r proxy x apps=*", "", "apps"},                                       // an unknown process matches no apps entry
		{"r proxy x apps=vmnat.exe", `path=C:\Windows\SysWOW64\vmnat.exe`, ""}, // name taken from the path
		{`r proxy x apps=C:\Program_SP_Files\Oracle\VirtualBox\*`, `app=VBoxHeadless.exe path=c:\program_SP_files\oracle\virtualbox\VBoxHeadless.exe`, ""},
		{`r proxy x apps=C:\Program_SP_Files\Oracle\VirtualBox\*`, `app=VBoxHeadless.exe path=D:\VirtualBox\VBoxHeadless.exe`, "apps"},
		{`r proxy x apps=C:\Program_SP_Files\Oracle\VirtualBox\*`, `app=VBoxHeadless.exe`, "apps"}, // path pattern needs a path
		{"r proxy x apps=/usr/bin/qemu-*", "app=qemu-system-x86_64 path=/usr/bin/qemu-system-x86_64", ""},
		{"r proxy x apps=/usr/bin/qemu-*", "path=/usr/local/bin/qemu-system-x86_64", "apps"},
		// services
		{"r direct services=iphlpsvc", "app=svchost.exe svc=BFE,IpHlpSvc", ""},
		{"r direct services=iphlpsvc,SharedAccess", "svc=sharedaccess", ""},
		{"r direct services=iphlpsvc", "app=svchost.exe svc=Dnscache", "services"},
		{"r direct services=iphlpsvc", "app=svchost.exe", "services"},
		// AND across fields: the first failing field is named
		{"r direct hosts=10.0.2.2 ports=47831 apps=svchost.exe", "dst=10.0.2.2 port=47831 app=svchost.exe", ""},
		{"r direct hosts=10.0.2.2 ports=47831 apps=svchost.exe", "dst=10.0.2.2 port=80 app=svchost.exe", "ports"},
		{"r direct hosts=10.0.2.2 ports=47831 apps=svchost.exe", "dst=10.0.2.3 port=80 app=curl", "hosts"},
		{"r direct network=tcp sources=10.0.2.0/24 services=x", "net=tcp src=10.0.2.1 svc=y", "services"},
	}
	for _, tt := range tests {
		t.Run(tt.rule+" | "+tt.query, func(t *testing.T) {
			r := rule(t, tt.rule)
			q := query(t, tt.query)
			if got := r.Mismatch(q); got != tt.want {
				t.Errorf("Mismatch = %q, want %q", got, tt.want)
			}
			want := -1
			if tt.want == "" {
				want = 0
			}
			if got := Compile([]Rule{r}).Decide(q).Index; got != want {
				t.Errorf("Table.Decide index = %d, want %d", got, want)
			}
		})
	}
}

func TestOrderFirstMatchWins(t *testing.T) {
	rs := ruleSet(t,
		"model-direct direct hosts=10.0.2.2,127.0.0.1,localhost,192.168.56.0/24 ports=47831",
		"hypervisor proxy exit apps=VirtualBoxVM.exe,VBoxHeadless.exe,vmnat.exe,qemu-system-*",
		"no-quic block network=udp ports=443",
		"default direct",
	)
	tests := []struct {
		query string
		want  string
		act   Action
		proxy string
	}{
		{"net=tcp app=VBoxHeadless.exe dst=10.0.2.2 port=47831", "model-direct", Direct, ""},
		{"net=tcp app=VBoxHeadless.exe dst=203.0.113.10 port=443", "hypervisor", Proxy, "exit"},
		{"net=udp app=qemu-system-x86_64 dst=203.0.113.10 port=443", "hypervisor", Proxy, "exit"},
		{"net=udp app=firefox dst=203.0.113.10 port=443", "no-quic", Block, ""},
		{"net=tcp app=firefox dst=203.0.113.10 port=443", "default", Direct, ""},
	}
	table := Compile(rs)
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			q := query(t, tt.query)
			for name, got := range map[string]Verdict{"linear": Linear(rs, q), "table": table.Decide(q)} {
				if got.Name != tt.want || got.Action != tt.act || got.Proxy != tt.proxy {
					t.Errorf("%s: got %+v, want %s %s %s", name, got, tt.want, tt.act, tt.proxy)
				}
			}
		})
	}
}

func TestNoRuleMatches(t *testing.T) {
	rs := ruleSet(t, "only-udp block network=udp")
	for name, got := range map[string]Verdict{
		"linear": Linear(rs, query(t, "net=tcp")),
		"table":  Compile(rs).Decide(query(t, "net=tcp")),
		"empty":  Compile(nil).Decide(query(t, "net=tcp")),
	} {
		want := Verdict{Action: Direct, Index: -1, Name: NoMatch}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
}

func TestDecideDoesNotModifyQuery(t *testing.T) {
	rs := ruleSet(t, "r direct apps=X.exe hosts=*.example.com", "s direct")
	q := &Query{Network: TCP, Dst: netip.MustParseAddr("::ffff:10.0.0.1"), Host: "A.Example.COM.", Owner: Owner{App: "X.EXE", AppPath: `C:\X.EXE`, Services: []string{"BFE"}}}
	before := *q
	beforeSvc := q.Services[0]
	Compile(rs).Decide(q)
	Linear(rs, q)
	Explain(rs, q)
	if q.Network != before.Network || q.Dst != before.Dst || q.Host != before.Host || q.App != before.App || q.AppPath != before.AppPath || q.Services[0] != beforeSvc {
		t.Errorf("query changed: %+v, was %+v", *q, before)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		kind, in, want string
	}{
		{"host", "10.0.2.300", `"10.0.2.300" is not a valid IP address`},
		{"host", "10.0.2.0/33", `"10.0.2.0/33" is not a valid CIDR`},
		{"host", "10.0.2.1/24", `"10.0.2.1/24" has host bits set; did you mean 10.0.2.0/24?`},
		{"host", "10.0.0.9-10.0.0.1", `range "10.0.0.9-10.0.0.1" ends before it starts`},
		{"host", "10.0.0.1-::1", `range "10.0.0.1-::1" mixes IPv4 and IPv6`},
		{"host", "192.168.*", `"192.168.*": wildcards are only allowed as a leading "*."; use a CIDR or range for addresses`},
		{"host", "*", `"*": a lone wildcard matches every name: leave hosts out instead`},
		{"host", "a..b", `"a..b": empty label in name`},
		{"host", "bad host", `"bad host": invalid character ' ' in name`},
		{"host", "fe80::1%eth0", `"fe80::1%eth0": zones are not supported`},
		{"host", "", "empty host"},
		{"port", "0", "port 0 is not a port (1-65535)"},
		{"port", "65536", `"65536" is not a port (1-65535)`},
		{"port", "9000-8000", `port range "9000-8000" ends before it starts`},
		{"port", "http", `"http" is not a port (1-65535)`},
		{"app", "", "empty app pattern"},
		{"app", `C:\VirtualBox\`, `app pattern "C:\\VirtualBox\\" ends with a separator; add "*" to match what is inside`},
		{"service", "", "empty service name"},
		{"service", "svc*", `service name "svc*" holds a character service names cannot have`},
	}
	for _, tt := range tests {
		t.Run(tt.kind+" "+tt.in, func(t *testing.T) {
			var err error
			switch tt.kind {
			case "host":
				_, err = ParseHost(tt.in)
			case "port":
				_, err = ParsePorts(tt.in)
			case "app":
				_, err = ParseApp(tt.in)
			case "service":
				_, err = ParseService(tt.in)
			}
			if err == nil || err.Error() != tt.want {
				t.Errorf("got %v, want %s", err, tt.want)
			}
		})
	}
}

func TestStringRoundTrip(t *testing.T) {
	for _, in := range []string{"10.0.2.2", "10.0.2.0/24", "10.0.0.1-10.0.0.9", "::1", "2001:db8::/32", "localhost", "*.example.com", "10.0.0.0/8"} {
		h, err := ParseHost(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.String(); got != in {
			t.Errorf("ParseHost(%q).String() = %q", in, got)
		}
	}
	if got := (PortRange{8000, 9000}).String(); got != "8000-9000" {
		t.Errorf("got %q", got)
	}
}

func TestExplain(t *testing.T) {
	rs := ruleSet(t,
		"hypervisor proxy exit apps=VirtualBoxVM.exe,svchost.exe",
		"model-direct direct hosts=10.0.2.2,127.0.0.1 ports=47831",
		"default direct",
	)
	v, steps := Explain(rs, query(t, "net=tcp app=curl dst=10.0.2.2 port=47831"))
	if v.Name != "model-direct" || len(steps) != 2 {
		t.Fatalf("got %+v %+v", v, steps)
	}
	want := Step{Index: 0, Name: "hypervisor", Field: "apps", Reason: `process "curl" is not VirtualBoxVM.exe, svchost.exe`}
	if steps[0] != want {
		t.Errorf("step 0 = %+v, want %+v", steps[0], want)
	}
	if !steps[1].Match {
		t.Errorf("step 1 = %+v, want a match", steps[1])
	}
	_, steps = Explain(rs, query(t, "net=tcp app=curl dst=203.0.113.1 host=echo.lab.test port=80"))
	if got, want := steps[1].Reason, `destination 203.0.113.1 / "echo.lab.test" is not in 10.0.2.2, 127.0.0.1`; got != want {
		t.Errorf("reason = %q, want %q", got, want)
	}
}

// TestExplainFolds: a query's text is compared case-insensitively (a path's separators
// either way) and shown normalized.
func TestExplainFolds(t *testing.T) {
	rs := ruleSet(t,
		"named proxy exit hosts=*.lab.test apps=curl",
		"byPath block apps=C:\\Tools\\Curl.exe",
		"default direct",
	)
	v, steps := Explain(rs, query(t, "net=tcp app=Curl.EXE host=Echo.LAB.test. path=C:\\TOOLS\\curl.exe"))
	if v.Name != "byPath" || len(steps) != 2 {
		t.Fatalf("got %+v %+v", v, steps)
	}
	if got, want := steps[0].Reason, `process "curl.exe" (c:/tools/curl.exe) is not curl`; got != want {
		t.Errorf("reason = %q, want %q", got, want)
	}
	_, steps = Explain(rs, query(t, "net=tcp app=CURL host=LAB.Test."))
	if got, want := steps[0].Reason, `destination "lab.test" is not in *.lab.test`; got != want {
		t.Errorf("reason = %q, want %q", got, want)
	}
}

// TestDecideAllocatesNothing: the table folds a query's case as it compares, and builds
// no lower-case copy (ASCII text; non-ASCII text is lower-cased once).
func TestDecideAllocatesNothing(t *testing.T) {
	rs := ruleSet(t,
		"a proxy exit hosts=*.lab.test,Example.COM ports=443",
		"b block apps=VBoxHeadless.exe,C:\\Program_SP_Files\\Oracle\\*",
		"c block services=SharedAccess",
		"d block apps=qemu-*",
		"default direct",
	)
	if raceOn {
		t.Skip("the race detector's sync.Pool drops the scratch at random")
	}
	table := Compile(rs)
	qs := []*Query{
		query(t, "net=tcp dst=203.0.113.1 host=WWW.Lab.Test. port=443 app=VBoxHeadless.EXE"),
		query(t, "net=tcp dst=203.0.113.1 host=EXAMPLE.com port=80 path=C:\\Program_SP_Files\\Oracle\\VirtualBox\\VBoxHeadless.exe"),
		query(t, "net=udp src=10.0.2.15 dst=10.0.2.2 port=53 app=svchost.exe svc=Dnscache,SHAREDACCESS"),
		query(t, "net=tcp dst=203.0.113.9 port=22 app=QEMU-System-x86_64"),
	}
	for _, q := range qs {
		if n := testing.AllocsPerRun(100, func() { table.Decide(q) }); n != 0 {
			t.Errorf("Decide(%+v) allocates %v times", *q, n)
		}
		if got, want := table.Decide(q), Linear(rs, q); got != want {
			t.Errorf("Decide(%+v) = %+v, Linear %+v", *q, got, want)
		}
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		p, s string
		want bool
	}{
		{"", "", true}, {"*", "", true}, {"a*", "a", true}, {"*a", "ba", true}, {"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false}, {"?", "", false}, {"a?c", "abc", true}, {"**a", "a", true},
		{"*.exe", "vmnat.exe", true}, {"*.exe", "vmnat.exe.bak", false}, {"a*a*a", "aaaa", true},
	}
	for _, tt := range tests {
		if got := globMatch(tt.p, tt.s, false); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v", tt.p, tt.s, got)
		}
	}
}

func TestBaseName(t *testing.T) {
	for in, want := range map[string]string{
		`C:\Windows\System32\svchost.exe`: "svchost.exe",
		`\\?\C:\x\y.exe`:                  "y.exe",
		`/usr/bin/qemu-system-x86_64`:     "qemu-system-x86_64",
		`plain.exe`:                       "plain.exe",
	} {
		if got := BaseName(in); got != want {
			t.Errorf("BaseName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDisabledRuleNeverMatches(t *testing.T) {
	rs := ruleSet(t, "off block ports=443", "default direct")
	rs[0].Disabled = true
	q := query(t, "net=tcp dst=203.0.113.1 port=443")
	for name, got := range map[string]Verdict{"linear": Linear(rs, q), "table": Compile(rs).Decide(q)} {
		if got.Name != "default" {
			t.Errorf("%s: got %+v, want the default rule", name, got)
		}
	}
	if rs[0].Match(q) {
		t.Error("Match: a disabled rule matched")
	}
	_, steps := Explain(rs, q)
	want := Step{Index: 0, Name: "off", Field: FieldEnabled, Reason: "the rule is disabled (enabled = false): it matches nothing"}
	if len(steps) != 2 || steps[0] != want {
		t.Errorf("steps = %+v, want first %+v", steps, want)
	}
}
