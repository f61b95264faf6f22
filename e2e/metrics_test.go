//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/control"
)

// metricsPort is where the scene serves metrics.
const metricsPort = "9477"

// metricsConfig is the scene's config with a block rule for port 8080 of the echo server
// ahead of the VM's proxy rule, and [metrics] as given.
func metricsConfig(metrics string) string {
	cfg := config(lab.GoSocksAddr, "\n[metrics]\n"+metrics+"\n")
	return strings.Replace(cfg, "[[rule]]\nname = \"vm\"\n",
		fmt.Sprintf("[[rule]]\nname = \"no-8080\"\nhosts = [%q]\nports = [8080]\naction = \"block\"\n\n[[rule]]\nname = \"vm\"\n", lab.ServiceAddr), 1)
}

// scrape fetches the metrics with curl in the host namespace and returns each sample by
// its name and labels as the exposition writes them (`router_bytes_total{direction="up"}`).
func (s *scene) scrape(url string) map[string]float64 {
	s.t.Helper()
	out, code := s.curl(s.lab.Host(), url)
	if code != 0 {
		s.t.Fatalf("curl %s in the host namespace: exit %d, %q", url, code, out)
	}
	samples := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			s.t.Fatalf("not a sample line: %q", line)
		}
		samples[line[:i]] = v
	}
	return samples
}

// TestMetrics: after a proxied and a refused guest flow, the metrics scraped with curl on
// the host's loopback count them with the bytes curl itself counted, and say what `router
// status --json` says; moved by a reload onto the VM-facing address (unsafe_listen), they
// answer the host there, while the guest is refused by the guard like any host service.
func TestMetrics(t *testing.T) {
	s := newScene(t, metricsConfig(`listen = "127.0.0.1:`+metricsPort+`"`))
	loop := "http://127.0.0.1:" + metricsPort + "/metrics"

	// A proxied flow; curl counts what it sent and received.
	out, code := s.curl(s.lab.Guest(), lab.EchoURL, "-w", `\n%{size_request} %{size_header} %{size_download}`)
	lines := strings.Fields(out) // the body (the exit address), then curl's three counts
	if code != 0 || len(lines) != 4 || lines[0] != lab.ExitAddr {
		t.Fatalf("guest curl: exit %d, %q; want the proxy's exit address and curl's counts", code, out)
	}
	var req, hdr, body uint64
	if _, err := fmt.Sscan(strings.Join(lines[1:], " "), &req, &hdr, &body); err != nil {
		t.Fatalf("curl's counts %q: %v", lines[1:], err)
	}
	// A refused one: the block rule refuses it (the router answers the request 403).
	if out, code := s.curl(s.lab.Guest(), "http://"+lab.ServiceAddr+":8080/"); gotThrough(out, code) {
		t.Fatalf("the guest got through the block rule: %q", out)
	}

	var m map[string]float64
	_ = wait.Poll(5*time.Second, func() bool { m = s.scrape(loop); return m["router_flows_live"] == 0 }) // the figures below say what is off
	want := map[string]float64{
		"router_flows_total":                                                     2,
		"router_flows_live":                                                      0,
		`router_bytes_total{direction="up"}`:                                     float64(req),
		`router_bytes_total{direction="down"}`:                                   float64(hdr + body),
		`router_refusals_total{reason="rule"}`:                                   1,
		`router_refusals_total{reason="upstream-down"}`:                          0,
		`router_rule_flows_total{action="block",index="3",rule="no-8080"}`:       1,
		`router_rule_flows_total{action="proxy",index="4",rule="vm"}`:            1,
		`router_rule_bytes_total{action="proxy",index="4",rule="vm"}`:            float64(req + hdr + body),
		`router_rule_flows_total{action="direct",index="1",rule="model-direct"}`: 0,
		`router_upstream_up{upstream="exit"}`:                                    1,
		`router_upstream_failures{upstream="exit"}`:                              0,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for _, k := range []string{`router_upstream_latency_seconds{upstream="exit"}`, "router_dns_pool_size", "router_start_time_seconds", "process_resident_memory_bytes", "go_goroutines"} {
		if m[k] <= 0 {
			t.Errorf("%s = %v, want a positive value", k, m[k])
		}
	}

	if raw, code := s.curl(s.lab.Host(), loop); code == 0 {
		var ours []string
		for _, l := range strings.Split(raw, "\n") {
			if strings.HasPrefix(l, "router_") {
				ours = append(ours, l)
			}
		}
		t.Logf("scrape:\n%s", strings.Join(ours, "\n"))
	}

	// The same numbers as status.
	out, code = run(s.ctx, s.lab.Host(), routerBin, "status", "--config", s.cfg, "--json")
	var st control.Status
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("router status --json: exit %d, %v\n%s", code, err, out)
	}
	if float64(st.Totals.Flows) != m["router_flows_total"] || float64(st.Totals.Up) != m[`router_bytes_total{direction="up"}`] ||
		float64(st.Totals.Down) != m[`router_bytes_total{direction="down"}`] || float64(st.Started.UnixNano())/1e9 != m["router_start_time_seconds"] {
		t.Errorf("status totals %+v (started %v) differ from the metrics", st.Totals, st.Started)
	}
	for _, r := range st.Refusals {
		if got := m[`router_refusals_total{reason="`+r.Reason+`"}`]; got != float64(r.Count) {
			t.Errorf("refusals %q: status %d, metrics %v", r.Reason, r.Count, got)
		}
	}

	// Onto the VM-facing address, by a reload: the host reaches it, the guest does not.
	gw := "http://" + lab.GatewayAddr + ":" + metricsPort + "/metrics"
	s.writeConfig(metricsConfig(`listen = "` + lab.GatewayAddr + `:` + metricsPort + `"` + "\nunsafe_listen = true"))
	if err := s.router.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitLog("reloaded", 5*time.Second)
	if m := s.scrape(gw); m["router_flows_total"] != 2 {
		t.Errorf("on the VM-facing address: router_flows_total = %v, want 2", m["router_flows_total"])
	}
	if out, code := s.curl(s.lab.Host(), loop); code == 0 {
		t.Errorf("the old loopback address still answers after the move: %.200q", out)
	}
	start := time.Now()
	out, code = s.curl(s.lab.Guest(), gw)
	if code == 0 {
		t.Errorf("the guest read the metrics: %.200q", out)
	}
	if code != 7 || time.Since(start) > 3*time.Second {
		t.Errorf("the guest's scrape ended with curl exit %d after %v; want 7 (refused at once by the guard)", code, time.Since(start).Round(time.Millisecond))
	}
	s.wantNoLeak("metrics")
}
