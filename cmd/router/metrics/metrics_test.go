package metrics

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/rules/refusal"
)

// fakeStatus is a daemon's status as `router status --json` would show it: three rules
// (one an implicit step), refusals of three reasons, upstreams in each state, live flows
// the fake-IP pool and one guest's upload budget to one domain.
func fakeStatus() control.Status {
	return control.Status{
		Started: time.Unix(1700000000, 500_000_000),
		Config:  "/etc/router/router.toml",
		Running: control.ConfigStat{SHA256: "ab12", Loaded: time.Unix(1700000100, 0), Reloads: 3, Refused: 1},
		Totals:  control.Totals{Flows: 12, Live: 2, Up: 3000, Down: 120000, Refused: 5},
		Rules: []control.RuleStat{
			{Index: 1, Name: "model-direct", Action: "direct", Hits: 3, Bytes: 4096},
			{Index: 2, Name: "vm", Action: "proxy", Proxy: "exit", Hits: 7, Bytes: 118904},
			{Index: 3, Name: "default", Action: "direct"},
			{Index: 0, Name: "host-off-limits", Action: "block", Hits: 2},
		},
		Refusals: []control.RefusalStat{
			{Reason: "rule", Count: 1, Recent: []control.Refused{{Dst: "203.0.113.10:8080", Rule: "no-8080"}}},
			{Reason: "host-off-limits", Count: 2},
			{Reason: "guest-udp", Count: 2},
		},
		Upstreams: []control.UpstreamStat{
			{Name: "exit", State: "up", Latency: 12500 * time.Microsecond},
			{Name: "backup", State: "down", Failures: 3, LastError: "connection refused"},
			{Name: "spare", State: "unknown"},
		},
		Flows: []control.FlowStat{
			{ID: 11, Src: "10.0.2.15:40000", Dst: "203.0.113.10:443", Rule: "vm", Action: "proxy", Up: 100, Down: 2000},
			{ID: 12, Src: "10.0.2.15:40002", Dst: "127.0.0.1:47831", Rule: "model-direct", Action: "direct", Up: 50, Down: 60},
		},
		DNS: control.DNSStat{Mode: "fake-ip", Pool: "198.18.0.0/15", PoolSize: 131070, Mapped: 40, InUse: 2},
		DomainBudgets: []control.DomainBudgetStat{
			{Budget: control.BudgetBytesUp, Guest: "vm 10.0.2.0/24", Domain: "example.com", Used: 60e6, Limit: 50e6, Over: true},
			{Budget: control.BudgetNames, Guest: "10.0.2.0/24", Domain: "exfil.example", Used: 201, Limit: 200, Over: true},
		},
	}
}

const wantExposition = `
# HELP router_bytes_total Bytes relayed since the daemon started, of ended and live flows: direction="up" from the clients, "down" to them.
# TYPE router_bytes_total counter
router_bytes_total{direction="down"} 120000
router_bytes_total{direction="up"} 3000
# HELP router_config_loaded_time_seconds When the running config was loaded (the start or the last reload applied), in seconds since the Unix epoch.
# TYPE router_config_loaded_time_seconds gauge
router_config_loaded_time_seconds 1.7000001e+09
# HELP router_dns_names_window Distinct names one guest looked up under one registrable domain in the guest's current window of the name budget ([budget] names_per_domain); the largest counts only (router status lists the same). Absent without the budget.
# TYPE router_dns_names_window gauge
router_dns_names_window{domain="exfil.example",guest="10.0.2.0/24"} 201
# HELP router_dns_names_window_limit The name budget a series of router_dns_names_window is held to: past it, the guest's new names under the domain are refused (or, with over = "alert", logged; with "ask", as the host's owner answers).
# TYPE router_dns_names_window_limit gauge
router_dns_names_window_limit{domain="exfil.example",guest="10.0.2.0/24"} 200
# HELP router_dns_pool_in_use Fake-IP addresses with at least one open flow (fake-ip mode only).
# TYPE router_dns_pool_in_use gauge
router_dns_pool_in_use 2
# HELP router_dns_pool_mapped Fake-IP addresses that stand for a name now (fake-ip mode only).
# TYPE router_dns_pool_mapped gauge
router_dns_pool_mapped 40
# HELP router_dns_pool_size Addresses the fake-IP pool can hand out (fake-ip mode only).
# TYPE router_dns_pool_size gauge
router_dns_pool_size 131070
# HELP router_flows_live Flows running now (relayed or being set up).
# TYPE router_flows_live gauge
router_flows_live 2
# HELP router_flows_total Flows since the daemon started: every flow decided (refused ones included) and every forward connection.
# TYPE router_flows_total counter
router_flows_total 12
# HELP router_refusals_total Refusals since the daemon started, by reason: the router's, the DNS server's and the capture's own (the kernel's or the Windows engine's).
# TYPE router_refusals_total counter
router_refusals_total{reason="capture-fault"} 0
router_refusals_total{reason="ask-denied"} 0
router_refusals_total{reason="budget"} 0
router_refusals_total{reason="caged-no-rule"} 0
router_refusals_total{reason="canary"} 0
router_refusals_total{reason="dns"} 0
router_refusals_total{reason="doh"} 0
router_refusals_total{reason="dot-direct"} 0
router_refusals_total{reason="fake-ip-unknown"} 0
router_refusals_total{reason="forward-source"} 0
router_refusals_total{reason="guest-udp"} 2
router_refusals_total{reason="host-off-limits"} 2
router_refusals_total{reason="icmp"} 0
router_refusals_total{reason="inbound-dns"} 0
router_refusals_total{reason="inbound-malformed"} 0
router_refusals_total{reason="limit"} 0
router_refusals_total{reason="local-udp"} 0
router_refusals_total{reason="model-api"} 0
router_refusals_total{reason="name-mismatch"} 0
router_refusals_total{reason="not-carried"} 0
router_refusals_total{reason="quic"} 0
router_refusals_total{reason="rule"} 1
router_refusals_total{reason="spoofed-source"} 0
router_refusals_total{reason="to-guest"} 0
router_refusals_total{reason="udp-oversize"} 0
router_refusals_total{reason="upstream-down"} 0
# HELP router_reloads_total Reloads since the daemon started, by outcome: "applied", or "refused" (the running config stayed; router status shows the last refusal's error).
# TYPE router_reloads_total counter
router_reloads_total{outcome="applied"} 3
router_reloads_total{outcome="refused"} 1
# HELP router_rule_bytes_total Bytes, both ways, of the flows each rule decided (ended and live) under the rule list of the last start or reload; every reload starts them from zero (a counter reset).
# TYPE router_rule_bytes_total counter
router_rule_bytes_total{action="block",index="0",rule="host-off-limits"} 0
router_rule_bytes_total{action="direct",index="1",rule="model-direct"} 4096
router_rule_bytes_total{action="direct",index="3",rule="default"} 0
router_rule_bytes_total{action="proxy",index="2",rule="vm"} 118904
# HELP router_rule_flows_total Flows each rule decided under the rule list of the last start or reload; every reload starts them from zero (a counter reset). index is the rule's 1-based position, 0 for an implicit step named by rule.
# TYPE router_rule_flows_total counter
router_rule_flows_total{action="block",index="0",rule="host-off-limits"} 2
router_rule_flows_total{action="direct",index="1",rule="model-direct"} 3
router_rule_flows_total{action="direct",index="3",rule="default"} 0
router_rule_flows_total{action="proxy",index="2",rule="vm"} 7
# HELP router_start_time_seconds When the daemon started, in seconds since the Unix epoch; the router_* counters other than the rules' count from then.
# TYPE router_start_time_seconds gauge
router_start_time_seconds 1.7000000005e+09
# HELP router_upload_window_bytes Bytes one guest sent up to one registrable domain (or address) in the guest's current window of the upload budget ([budget] bytes_up_per_domain); the largest counts only (router status lists the same). Absent without the budget.
# TYPE router_upload_window_bytes gauge
router_upload_window_bytes{domain="example.com",guest="vm 10.0.2.0/24"} 6e+07
# HELP router_upload_window_limit_bytes The upload budget a series of router_upload_window_bytes is held to: past it, the guest's flows to the domain are cut and new ones refused (or, with over = "alert", logged; with "ask", as the host's owner answers).
# TYPE router_upload_window_limit_bytes gauge
router_upload_window_limit_bytes{domain="example.com",guest="vm 10.0.2.0/24"} 5e+07
# HELP router_upstream_failures Failures in a row of the upstream proxy; 0 after a success.
# TYPE router_upstream_failures gauge
router_upstream_failures{upstream="backup"} 3
router_upstream_failures{upstream="exit"} 0
router_upstream_failures{upstream="spare"} 0
# HELP router_upstream_latency_seconds How long the upstream's last successful set-up took (dial, TLS, handshake, the proxy's own connect); absent before the first.
# TYPE router_upstream_latency_seconds gauge
router_upstream_latency_seconds{upstream="exit"} 0.0125
# HELP router_upstream_up 1 when the upstream proxy's last connect or probe succeeded, 0 when it failed; absent while nothing was tried.
# TYPE router_upstream_up gauge
router_upstream_up{upstream="backup"} 0
router_upstream_up{upstream="exit"} 1
`

func TestCollect(t *testing.T) {
	c := NewCollector(fakeStatus)
	if err := testutil.CollectAndCompare(c, strings.NewReader(wantExposition)); err != nil {
		t.Error(err)
	}
}

// TestOneSnapshotPerScrape: a scrape asks for the status once, whatever it emits.
func TestOneSnapshotPerScrape(t *testing.T) {
	var calls atomic.Int64
	reg := NewRegistry(func() control.Status { calls.Add(1); return fakeStatus() })
	for i := 1; i <= 3; i++ {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
		if got := calls.Load(); got != int64(i) {
			t.Fatalf("after %d scrapes the status was taken %d times", i, got)
		}
	}
}

// TestNoFlowLabels: the series do not grow with the live flows.
func TestNoFlowLabels(t *testing.T) {
	few := fakeStatus()
	many := fakeStatus()
	for i := range 1000 {
		many.Flows = append(many.Flows, control.FlowStat{ID: uint64(100 + i), Src: fmt.Sprintf("10.0.2.15:%d", 20000+i), Dst: "203.0.113.10:443", Rule: "vm", Action: "proxy"})
	}
	many.Totals.Live = len(many.Flows)
	a := testutil.CollectAndCount(NewCollector(func() control.Status { return few }))
	b := testutil.CollectAndCount(NewCollector(func() control.Status { return many }))
	if a != b {
		t.Errorf("%d series with 2 live flows, %d with 1002", a, b)
	}
}

// TestIdleDaemon: a daemon that has seen nothing, in proxy DNS mode with one upstream not
// yet tried: every counter at zero, no pool and no upstream state or latency.
func TestIdleDaemon(t *testing.T) {
	st := control.Status{
		Started:   time.Unix(1700000000, 0),
		Rules:     []control.RuleStat{{Index: 1, Name: "default", Action: "direct"}},
		Upstreams: []control.UpstreamStat{{Name: "exit", State: "unknown"}},
		DNS:       control.DNSStat{Mode: "proxy"},
	}
	c := NewCollector(func() control.Status { return st })
	want := `
# HELP router_upstream_failures Failures in a row of the upstream proxy; 0 after a success.
# TYPE router_upstream_failures gauge
router_upstream_failures{upstream="exit"} 0
# HELP router_flows_total Flows since the daemon started: every flow decided (refused ones included) and every forward connection.
# TYPE router_flows_total counter
router_flows_total 0
# HELP router_rule_flows_total Flows each rule decided under the rule list of the last start or reload; every reload starts them from zero (a counter reset). index is the rule's 1-based position, 0 for an implicit step named by rule.
# TYPE router_rule_flows_total counter
router_rule_flows_total{action="direct",index="1",rule="default"} 0
`
	names := []string{"router_upstream_failures", "router_upstream_up", "router_upstream_latency_seconds", "router_flows_total",
		"router_rule_flows_total", "router_dns_pool_size", "router_dns_pool_mapped", "router_dns_pool_in_use"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "router_refusals_total"); n != len(refusal.All()) {
		t.Errorf("%d refusal series, want one per reason (%d)", n, len(refusal.All()))
	}
}

// TestLint: names, types and help follow Prometheus's conventions, and a pedantic registry
// finds the collector consistent with what it describes.
func TestLint(t *testing.T) {
	c := NewCollector(fakeStatus)
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}
}

// TestRegistry: the registry holds the Go runtime's metrics besides the router's, and two
// registries live side by side (no global state).
func TestRegistry(t *testing.T) {
	for range 2 {
		mfs, err := NewRegistry(fakeStatus).Gather()
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, mf := range mfs {
			have[mf.GetName()] = true
		}
		for _, name := range []string{"router_flows_total", "go_goroutines", "go_memstats_alloc_bytes"} {
			if !have[name] {
				t.Errorf("no %s among %d families", name, len(mfs))
			}
		}
	}
}

// serve runs the server on a loopback port; the returned function stops it and returns
// Serve's error.
func serve(t *testing.T, status func() control.Status) (string, func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, Handler(NewRegistry(status), nil), nil) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			return fmt.Errorf("Serve did not return after its context ended")
		}
	}
	t.Cleanup(func() { stop() })
	return "http://" + ln.Addr().String(), stop
}

func TestServe(t *testing.T) {
	base, stop := serve(t, fakeStatus)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableCompression: true}}

	get := func(method, path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r io.Reader = resp.Body
		if resp.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			r = zr
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	resp, body := get("GET", "/metrics", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("GET /metrics: %s, %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	for _, line := range []string{"router_flows_total 12", `router_refusals_total{reason="rule"} 1`, `router_upstream_up{upstream="exit"} 1`, "go_goroutines "} {
		if !strings.Contains(body, "\n"+line) {
			t.Errorf("GET /metrics lacks %q", line)
		}
	}
	resp, body = get("GET", "/metrics", map[string]string{"Accept-Encoding": "gzip"})
	if resp.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(body, "\nrouter_flows_total 12\n") {
		t.Errorf("gzip: %s, encoding %q", resp.Status, resp.Header.Get("Content-Encoding"))
	}
	for _, c := range []struct {
		method, path string
		hdr          map[string]string
		want         int
	}{
		{"HEAD", "/metrics", nil, http.StatusOK},
		{"POST", "/metrics", nil, http.StatusMethodNotAllowed},
		{"GET", "/", nil, http.StatusNotFound},
		{"GET", "/debug/pprof/", nil, http.StatusNotFound},
	} {
		if resp, _ := get(c.method, c.path, c.hdr); resp.StatusCode != c.want {
			t.Errorf("%s %s: %s, want %d", c.method, c.path, resp.Status, c.want)
		}
	}

	// A header past the limit is refused: 431, or a reset when the server closes on the
	// unread rest of it first.
	big, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	big.SetDeadline(time.Now().Add(5 * time.Second))
	big.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("x", 4*maxHeaderBytes) + "\r\n\r\n"))
	b, err := io.ReadAll(big)
	big.Close()
	if !strings.HasPrefix(string(b), "HTTP/1.1 431 ") && (err == nil || strings.Contains(string(b), "200 OK")) {
		t.Errorf("a %d-byte header: %q, %v", 4*maxHeaderBytes, b, err)
	}

	// A client that stops halfway through its header does not hold the server up (the
	// header timeout cuts it off later).
	slow, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := slow.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get("GET", "/metrics", nil); resp.StatusCode != 200 {
		t.Errorf("with a slow client connected: %s", resp.Status)
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), time.Second); err == nil {
		c.Close()
		t.Error("the listener still accepts after Serve returned")
	}
}

// TestDisabledRule: a rule with enabled = false is marked by router_rule_disabled, and its
// counters stay (at zero) like any rule's.
func TestDisabledRule(t *testing.T) {
	st := fakeStatus()
	st.Rules = append(st.Rules, control.RuleStat{Index: 4, Name: "old", Action: "block", Disabled: true})
	want := `
# HELP router_rule_disabled 1 for each rule kept in the config with enabled = false, which decides no flow.
# TYPE router_rule_disabled gauge
router_rule_disabled{index="4",rule="old"} 1
`
	if err := testutil.CollectAndCompare(NewCollector(func() control.Status { return st }), strings.NewReader(want), "router_rule_disabled"); err != nil {
		t.Error(err)
	}
}
