package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/windivert/adapters"
)

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := dispatchAs(args, &out, &errb, func() (bool, error) { return true, nil }) // as root: the commands' own checks
	return out.String(), errb.String(), code
}

// checkLintsClean fails t unless `router lint` with args exits 0 and finds no error and no
// warning.
func checkLintsClean(t *testing.T, args ...string) {
	t.Helper()
	out, errOut, code := run(t, append([]string{"lint"}, args...)...)
	if code != exitOK || !strings.Contains(out, "0 errors, 0 warnings") {
		t.Errorf("lint %q: exit %d, output:\n%s%s", args, code, out, errOut)
	}
}

// checkSays fails t for each of wants that out does not contain.
func checkSays(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// statusText is st as `router status` prints it at now.
func statusText(st *control.Status, now time.Time) string {
	var b bytes.Buffer
	writeStatus(&b, st, now)
	return b.String()
}

const (
	specConfig = "../../testdata/conf/virtualbox.toml"
	trapConfig = "../../testdata/conf/trap.toml"
)

func TestLint(t *testing.T) {
	out, _, code := run(t, "lint", "--config", trapConfig)
	if code != exitFindings || !strings.Contains(out, `rule #2 "model-direct" is shadowed for local destinations`) || !strings.Contains(out, "trap.toml:13: error") {
		t.Errorf("trap: exit %d, output:\n%s", code, out)
	}
	checkLintsClean(t, "--os", "windows", "--config", specConfig)
	out, _, code = run(t, "lint", "--config", trapConfig, "--json")
	var fs []map[string]any
	if err := json.Unmarshal([]byte(out), &fs); err != nil || code != exitFindings || fs[0]["rule"] != "model-direct" || fs[0]["other"] != "hypervisor" {
		t.Errorf("json: exit %d, err %v, output:\n%s", code, err, out)
	}
	if _, _, code := run(t, "lint", "--config", trapConfig, "--strict"); code != exitFindings {
		t.Errorf("strict: exit %d", code)
	}
	_, errOut, code := run(t, "lint", "--config", "../../testdata/conf/bad/06-bad-ip.toml")
	if code != exitUsage || !strings.Contains(errOut, `06-bad-ip.toml:5: rule #1 "model-direct", hosts[2]: "10.0.2.300" is not a valid IP address`) {
		t.Errorf("bad config: exit %d, stderr:\n%s", code, errOut)
	}
}

func TestExplain(t *testing.T) {
	out, _, code := run(t, "explain", "--config", trapConfig, "--app", "svchost.exe", "--dst", "10.0.2.2:47831")
	if code != exitOK || !strings.Contains(out, `verdict: proxy via exit (198.51.100.1:1080), by rule #1 "hypervisor" (`) {
		t.Errorf("trap: exit %d, output:\n%s", code, out)
	}
	out, _, code = run(t, "explain", "--os", "windows", "--config", specConfig, "--app", "VirtualBoxVM.exe", "--src", "127.0.0.1", "--dst", "127.0.0.1:47831")
	if code != exitOK {
		t.Errorf("explain: exit %d", code)
	}
	checkSays(t, out,
		"preset virtualbox: caged apps VirtualBoxVM.exe, VBoxHeadless.exe, VBoxNetNAT.exe (NAT in user space)",
		"flow: caged tcp from 127.0.0.1 by VirtualBoxVM.exe to 127.0.0.1:47831",
		"verdict: direct, by the implicit step (host off limits)",
		`implicit: the flow is caged (its process "VirtualBoxVM.exe" is a caged app (named by a proxy or block rule, or a hypervisor preset)) and 127.0.0.1 is this machine or its link: 127.0.0.1:47831 is a forward's connect address, and the flow's process carries a guest's traffic there, which caged traffic may reach`,
	)
	out, _, _ = run(t, "explain", "--os", "windows", "--config", specConfig, "--app", "VBoxHeadless.exe", "--dst", "api.openai.com:443", "--json")
	var o explainOut
	if err := json.Unmarshal([]byte(out), &o); err != nil || o.Verdict.Rule != "hypervisor" || o.Verdict.Index != 2 || o.Verdict.Proxy != "exit" || len(o.Steps) != 2 || o.Steps[0].Field != "hosts" {
		t.Errorf("json: %v %+v", err, o)
	}
	out, _, _ = run(t, "explain", "--os", "windows", "--config", specConfig, "--network", "udp", "--src", "10.0.2.15", "--dst", "203.0.113.10:443")
	if !strings.Contains(strings.Join(strings.Fields(out), " "), `verdict: direct, by the implicit step (not caged: this host's own)`) {
		t.Errorf("host flow:\n%s", out)
	}
	out, _, _ = run(t, "explain", "--os", "windows", "--config", specConfig, "--from-vm", "--src", "10.0.2.15", "--dst", "203.0.113.10:443")
	if !strings.Contains(out, `verdict: proxy via exit (proxy.example.net:1080), by rule #2 "hypervisor"`) {
		t.Errorf("vm flow:\n%s", out)
	}
	for _, args := range [][]string{
		{"explain", "--config", specConfig},
		{"explain", "--config", specConfig, "--dst", "nohost"},
		{"explain", "--config", specConfig, "--dst", "10.0.0.1:0"},
		{"explain", "--config", specConfig, "--dst", "10.0.0.1:80", "--network", "icmp"},
		{"explain", "--config", specConfig, "--dst", "10.0.0.1:80", "extra"},
	} {
		if _, _, code := run(t, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
	}
}

func TestHelp(t *testing.T) {
	out, _, code := run(t, "--help")
	if code != exitOK || !strings.Contains(out, "router explain --config FILE") {
		t.Errorf("help: %d %s", code, out)
	}
	if _, _, code := run(t, "frobnicate"); code != exitUsage {
		t.Errorf("unknown command: exit %d", code)
	}
	if _, errOut, code := run(t, "lint", "--help"); code != exitOK || !strings.Contains(errOut, "Usage: router lint") {
		t.Errorf("lint --help: %d %s", code, errOut)
	}
}

func TestWriteStatus(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := &control.Status{
		Started: now.Add(-time.Hour), Config: "/etc/router/config.toml",
		Totals: control.Totals{Flows: 12, Live: 1, Up: 2048, Down: 3 << 20, Refused: 4},
		Rules: []control.RuleStat{
			{Index: 1, Name: "cage", Action: "proxy", Proxy: "exit", Hits: 11, Bytes: 3<<20 + 2048},
			{Index: 0, Name: "(host off limits)", Action: "block", Hits: 1},
		},
		Refusals: []control.RefusalStat{{Reason: "guest-udp", Count: 4, Recent: []control.Refused{
			{At: now.Add(-12 * time.Second), Src: "10.0.2.15:5353", Dst: "224.0.0.251:5353"}}}},
		Upstreams: []control.UpstreamStat{{Name: "exit", State: "up", Since: now.Add(-3 * time.Minute), Latency: 42 * time.Millisecond}},
		Flows: []control.FlowStat{{ID: 7, Src: "10.0.2.15:40000", Dst: "198.18.0.5:443", Host: "api.example.com", Rule: "cage",
			Action: "proxy", Proxy: "exit", Age: 5 * time.Second, Up: 2048, Down: 3 << 20, DownRate: 1 << 20}},
		DNS: control.DNSStat{Mode: "fake-ip", Pool: "198.18.0.0/15", PoolSize: 131072, Mapped: 3, InUse: 1},
	}
	checkSays(t, statusText(st, now),
		"flows: 12 (1 live), up 2.0 KiB, down 3.0 MiB; refused: 4",
		"exit      up     3m0s   42ms",
		"#1 cage",
		"proxy via exit",
		"guest-udp  4      10.0.2.15:5353 → 224.0.0.251:5353, 12s ago",
		"198.18.0.5:443 (api.example.com)",
		"1.0 MiB/s",
	)
}

// fakeAdapters is a Windows machine with the Default Switch and an internal switch.
type fakeAdapters struct{}

func (fakeAdapters) Interfaces() ([]adapters.Interface, error) {
	f := false
	return []adapters.Interface{
		{Name: "Wi-Fi", Description: "Intel(R) Wi-Fi", Up: true, Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.1.10/24")}},
		{Name: "vEthernet (Default Switch)", Description: "Hyper-V Virtual Ethernet Adapter", Up: true, Prefixes: []netip.Prefix{netip.MustParsePrefix("172.22.64.1/20")}},
		{Name: "vEthernet (AgentCage)", Description: "Hyper-V Virtual Ethernet Adapter #2", Up: true, Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.200.1/24")}, Forwarding: &f},
	}, nil
}
func (fakeAdapters) NATs() ([]netip.Prefix, error) { return nil, nil }
func (fakeAdapters) WSL() (adapters.WSL, error)    { return adapters.WSL{}, errors.New("no WSL") }

func TestAdapters(t *testing.T) {
	var out, errOut bytes.Buffer
	bridged := func() []adapters.Bridged {
		return []adapters.Bridged{{Hypervisor: "virtualbox", VM: "lan", Slot: "0", HostNIC: "Wi-Fi"}}
	}
	if code := listAdapters(nil, &out, &errOut, fakeAdapters{}, bridged); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	checkSays(t, out.String(), "vEthernet (Default Switch)  [hyperv-default-switch, up]", "cage:        UNCAGED", "vEthernet (AgentCage)  [hyperv-switch, up]", "closed by construction",
		"BRIDGED (no capture sees these guests", `virtualbox VM "lan" adapter 0 is bridged to Wi-Fi`)
	if strings.Contains(out.String(), "Wi-Fi  [") {
		t.Errorf("a physical adapter is listed:\n%s", out.String())
	}
	out.Reset()
	if code := listAdapters([]string{"--json"}, &out, &errOut, fakeAdapters{}, bridged); code != exitOK || !strings.Contains(out.String(), `"Kind": "hyperv-default-switch"`) || !strings.Contains(out.String(), `"HostNIC": "Wi-Fi"`) {
		t.Errorf("json: exit %d\n%s", code, out.String())
	}
}

// TestAddressCredentialsNeverEchoed: a password written inside a proxy's address is refused
// by every command that reads the config, and none of them repeats it.
func TestAddressCredentialsNeverEchoed(t *testing.T) {
	for _, cfg := range []string{"../../testdata/conf/bad/54-address-credentials.toml", "../../testdata/conf/bad/57-address-url-credentials.toml"} {
		for _, args := range [][]string{
			{"lint", "--config", cfg},
			{"lint", "--config", cfg, "--json"},
			{"explain", "--config", cfg, "--dst", "203.0.113.10:80"},
			{"run", "--config", cfg, "--log-format", "json"},
			{"status", "--config", cfg},
			{"cleanup", "--config", cfg},
		} {
			out, errOut, code := run(t, args...)
			if code == exitOK {
				t.Errorf("%v: exit 0, want the config refused", args)
			}
			if strings.Contains(out+errOut, "hunter2") {
				t.Errorf("%v echoed the password:\n%s%s", args, out, errOut)
			}
			if !strings.Contains(errOut, "credentials inside the address are refused") {
				t.Errorf("%v: stderr lacks the reason:\n%s", args, errOut)
			}
		}
	}
}
