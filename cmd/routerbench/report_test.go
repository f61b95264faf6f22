//go:build linux

package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/bench"
)

// fixedResults is three rounds of made-up figures: the second round loaded (every row at
// half speed), so a ratio of medians and a median of per-round ratios differ.
func fixedResults() (options, []string, *results) {
	o := options{rounds: 3, size: 1 << 30, conns: 5000, par: 32, seq: 2000, fetches: 1000, streams: 30, idle: []int{2000}}
	names := []string{rowUpstream, rowRedsocks, rowRouterBase, rowRouter}
	res := newResults(3)
	for i, load := range []float64{1, 0.5, 1.04} {
		res.set(rowUpstream, "tput", i, 1000*load)
		res.set(rowRedsocks, "tput", i, 600*load)
		res.set(rowRouter, "tput", i, []float64{1.5, 1.4, 1.6}[i]*600*load)
		res.set(rowRouterBase, "tput", i, []float64{1.5, 1.45, 1.55}[i]*600*load)
		res.set(rowRedsocks, "cpu_gib", i, 1.0)
		res.set(rowRouter, "cpu_gib", i, 0.4)
		res.set(rowRouterBase, "cpu_gib", i, 0.4)
		res.set(rowUpstream, "mach_gib", i, 1.6)
		res.set(rowRedsocks, "mach_gib", i, 3.0)
		res.set(rowRouter, "mach_gib", i, []float64{1.8, 1.5, 1.65}[i])
		res.set(rowRouterBase, "mach_gib", i, 1.5)
		res.set(rowUpstream, "rate_cps", i, []float64{2400, 2400, 2600}[i])
		res.set(rowRedsocks, "rate_cps", i, 2000)
		res.set(rowRouter, "rate_cps", i, []float64{2500, 2300, 2450}[i])
		res.set(rowUpstream, "rate_mach_us", i, 600)
		res.set(rowRedsocks, "rate_mach_us", i, 1000)
		res.set(rowRouter, "rate_mach_us", i, []float64{750, 800, 700}[i])
		res.set(rowUpstream, "seq_mach_us", i, 700)
		res.set(rowRedsocks, "seq_cps", i, 1100)
		res.set(rowRouter, "seq_cps", i, 1000)
		res.set(rowRouter, "seq_mach_us", i, 900)
		res.set(rowRedsocks, "seq_mach_us", i, 1000)
		res.set(rowUpstream, "seq_p50", i, 500)
		res.set(rowRedsocks, "seq_p50", i, 800)
		res.set(rowRouter, "seq_p50", i, []float64{750, 900, 700}[i])
		res.set(rowRouterBase, "seq_p50", i, 800)
		res.set(rowRouter, "sockmaps", i, 0)
		res.set(rowUpstream, "agent_wall", i, []float64{4.0, 8.0, 4.2}[i])
		res.set(rowRedsocks, "agent_wall", i, []float64{6.0, 12.0, 6.0}[i])
		res.set(rowRouter, "agent_wall", i, []float64{4.2, 8.0, 4.8}[i])
		res.set(rowRouter, "agent_p50", i, 30)
		res.set(rowRouter, "agent_p99", i, 120)
		res.set(rowUpstream, "model_ttfb_p50", i, 800)
		res.set(rowUpstream, "model_ttfb_p99", i, 1500)
		res.set(rowRouter, "model_ttfb_p50", i, []float64{950, 1000, 900}[i])
		res.set(rowRouter, "model_ttfb_p99", i, 2000)
		res.set(rowUpstream, "model_gap_p50", i, 2100)
		res.set(rowRouter, "model_gap_p50", i, 2100)
		res.set(rowUpstream, "model_gap_p99", i, 2400)
		res.set(rowRouter, "model_gap_p99", i, 2600)
	}
	res.set(rowRouter, "idle2000_kib", 0, 3.5)
	return o, names, res
}

// TestReportPairsWithinRounds: ratios are medians of per-round ratios with their range, not
// ratios of medians; the added costs are differences from the ceiling's in each round and
// their ratio to redsocks' in the same round; the checklist judges the medians, or every
// round where the target says so, and counts the rounds that met each target.
func TestReportPairsWithinRounds(t *testing.T) {
	o, names, res := fixedResults()
	var b strings.Builder
	report(&b, o, names, res)
	out := b.String()
	for _, want := range []string{
		"|           upstream|             redsocks|          router-base|               router|",
		"download MiB/s, 1 GiB|    1000 (500–1040)|        600 (300–624)|        900 (435–967)|        900 (420–998)|",
		"÷ redsocks (paired)|   1.67 (1.67–1.67)|                    1|     1.50 (1.45–1.55)|     1.50 (1.40–1.60)|",
		"÷ upstream alone (paired)|                  1|     0.60 (0.60–0.60)|     0.90 (0.87–0.93)|     0.90 (0.84–0.96)|",
		"machine CPU s/GiB (all CPUs, all work)|   1.60 (1.60–1.60)|     3.00 (3.00–3.00)|     1.50 (1.50–1.50)|     1.65 (1.50–1.80)|",
		"÷ redsocks (paired)|   0.53 (0.53–0.53)|                    1|     0.50 (0.50–0.50)|     0.55 (0.50–0.60)|",
		// What each row adds over the ceiling, and that over redsocks' added, per round.
		"added over the ceiling s/GiB (row − upstream, paired)|                  0|  +1.40 (+1.40–+1.40)|  -0.10 (-0.10–-0.10)|  +0.05 (-0.10–+0.20)|",
		"added ÷ redsocks' added (paired)|                  0|                    1|  -0.07 (-0.07–-0.07)|    0.04 (-0.07–0.14)|",
		"added over the ceiling µs/conn (row − upstream, paired)|                  0|     +400 (+400–+400)|                    –|     +150 (+100–+200)|",
		"added ÷ redsocks' added (paired)|                  0|                    1|                    –|     0.38 (0.25–0.50)|",
		"added over the ceiling µs/conn (row − upstream, paired)|                  0|     +300 (+300–+300)|                    –|     +200 (+200–+200)|",
		"added ÷ redsocks' added (paired)|                  0|                    1|                    –|     0.67 (0.67–0.67)|",
		"conn/s, 2000 × 1 KiB, sequential|                  –|     1100 (1100–1100)|                    –|     1000 (1000–1000)|",
		"machine CPU µs/conn|      700 (700–700)|     1000 (1000–1000)|                    –|        900 (900–900)|",
		"p50 added vs upstream alone µs (paired)|                  0|     +300 (+300–+300)|     +300 (+300–+300)|     +250 (+200–+400)|",
		// The agent's workload.
		"agent: 1000 HTTPS fetches, 16 parallel, wall s|   4.20 (4.00–8.00)|    6.00 (6.00–12.00)|                    –|     4.80 (4.20–8.00)|",
		"÷ upstream alone (paired)|                  1|     1.50 (1.43–1.50)|                    –|     1.05 (1.00–1.14)|",
		"per fetch p50 / p99 ms|                  –|                    –|                    –|         30.0 / 120.0|",
		"agent: model stream, 30 × 40 events 2ms apart: path|         no forward|                    –|                    –|          the forward|",
		"TTFB p50 added vs upstream's µs (paired)|                  0|                    –|                    –|     +150 (+100–+200)|",
		"gap between events p50 / p99 µs|        2100 / 2400|                    –|                    –|          2100 / 2600|",
		"agent: the download of phase get, s|   1.02 (0.98–2.05)|     1.71 (1.64–3.41)|     1.14 (1.06–2.35)|     1.14 (1.03–2.44)|",
		"agent: HTTPS burst + download, s|  5.18 (5.02–10.05)|    7.71 (7.64–15.41)|                    –|    5.83 (5.34–10.44)|",
		// router ÷ router-base, every round listed.
		"download MiB/s                          |1.000 (0.966–1.032)   |1.000 0.966 1.032  |",
		"machine CPU s/GiB                       |1.100 (1.000–1.200)   |1.200 1.000 1.100  |",
		"latency p50, sequential                 |0.938 (0.875–1.125)   |0.938 1.125 0.875  |",
		"  p50 added, router − router-base (µs)  |-50 (-100–+100)       |-50 +100 -100      |",
		// The checklist: every target says how many rounds met it.
		"  ✓  throughput ≥ 1.25 × redsocks, every round                                                1.50 (1.40–1.60)  (3 of 3 rounds meet it)\n",
		"  ✗  throughput ≥ 0.95 × the ceiling                                                          0.90 (0.84–0.96)  (1 of 3 rounds meet it)\n",
		"  ✓  machine CPU added over the ceiling per GiB ≤ 0.50 × redsocks' added                      0.04 (-0.07–0.14)  (3 of 3 rounds meet it)\n",
		"  ✓  machine CPU added over the ceiling per connection, 32 parallel ≤ 0.50 × redsocks' added  0.38 (0.25–0.50)  (3 of 3 rounds meet it)\n",
		"  ✗  machine CPU added over the ceiling per connection, sequential ≤ 0.50 × redsocks' added   0.67 (0.67–0.67)  (0 of 3 rounds meet it)\n",
		"  ✓  proxy CPU per GiB ≤ 0.50 × redsocks'                                                     0.40 (0.40–0.40)  (3 of 3 rounds meet it)\n",
		// "every round": the median meets it, one round does not, so it is missed.
		"  ✗  conn/s (32 parallel) ≥ 1.20 × redsocks, every round                                      1.23 (1.15–1.25)  (2 of 3 rounds meet it)\n",
		"  ✓  conn/s (32 parallel) ≥ 0.90 × the ceiling                                                0.96 (0.94–1.04)  (3 of 3 rounds meet it)\n",
		"  ✗  added p50 latency ≤ 50 µs over the ceiling (sequential, router − upstream)               +250 (+200–+400)  (0 of 3 rounds meet it)\n",
		"  ✓  agent's HTTPS burst ≥ 1.20 × faster than redsocks (redsocks ÷ router wall time)          1.43 (1.25–1.50)  (3 of 3 rounds meet it)\n",
		// Not "every round": the median judges.
		"  ✓  agent's HTTPS burst within 10 % of the ceiling (router ÷ upstream wall time ≤ 1.10)      1.05 (1.00–1.14)  (2 of 3 rounds meet it)\n",
		"  ✓  ≤ 8 KiB per idle flow, 2000 flows                                                        3.5\n",
		"The change costs ≤ 2 %",
		"  ✓  throughput ≥ 0.98 × router-base           1.000 (0.966–1.032)  (2 of 3 rounds meet it)\n",
		"  ✓  proxy CPU per GiB ≤ 1.02 × router-base    1.000 (1.000–1.000)\n",
		"  ✗  machine CPU per GiB ≤ 1.02 × router-base  1.100 (1.000–1.200)  (1 of 3 rounds meet it)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", out)
	}
}

// TestReportWithoutRouterBase: no router-base row, no router ÷ router-base table and no cost
// line; an unmeasured target is n/a, not a ✗.
func TestReportWithoutRouterBase(t *testing.T) {
	o, _, res := fixedResults()
	var b strings.Builder
	report(&b, o, []string{rowUpstream, rowRedsocks, rowRouter}, res)
	out := b.String()
	for _, bad := range []string{"router ÷ router-base", "costs ≤ 2 %", "router-base|"} {
		if strings.Contains(out, bad) {
			t.Errorf("report has %q:\n%s", bad, out)
		}
	}
	o.idle = []int{9000}
	b.Reset()
	report(&b, o, []string{rowUpstream, rowRedsocks, rowRouter}, res)
	if want := "n/a  ≤ 8 KiB per idle flow, 9000 flows"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
}

func TestSpreadString(t *testing.T) {
	for _, tt := range []struct {
		s      bench.Spread
		prec   int
		signed bool
		want   string
	}{
		{bench.SpreadOf([]float64{1.18, 1.23, 1.31}), 2, false, "1.23 (1.18–1.31)"},
		{bench.SpreadOf([]float64{1.234}), 2, false, "1.23"},
		{bench.SpreadOf([]float64{math.NaN()}), 2, false, "–"},
		{bench.SpreadOf([]float64{-20, 10, 35}), 0, true, "+10 (-20–+35)"},
		{bench.SpreadOf([]float64{-0.2}), 0, true, "0"},
	} {
		if got := spreadString(tt.s, tt.prec, tt.signed); got != tt.want {
			t.Errorf("spreadString(%+v) = %q, want %q", tt.s, got, tt.want)
		}
	}
}

// TestDump: -json holds every figure (NaN as null, which encoding/json cannot write as a
// number) and every paired figure per round.
func TestDump(t *testing.T) {
	o, names, res := fixedResults()
	res.set(rowRedsocks, "rate_cps", 1, math.NaN())
	b, err := json.Marshal(dump(meta{Rounds: o.rounds, Rows: names}, names, res))
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Figures map[string]map[string][]*float64
		Paired  map[string]map[string]struct {
			Rounds      []*float64
			Median, Min *float64
		}
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if v := back.Figures[rowRedsocks]["rate_cps"]; len(v) != 3 || v[1] != nil || *v[0] != 2000 {
		t.Errorf("figures redsocks rate_cps = %v", v)
	}
	p, ok := back.Paired[rowRouter]["tput/redsocks"]
	if !ok || len(p.Rounds) != 3 || math.Abs(*p.Rounds[1]-1.4) > 1e-9 || math.Abs(*p.Median-1.5) > 1e-9 {
		t.Errorf("paired router tput/redsocks = %+v", p)
	}
	if p := back.Paired[rowRouter]["rate_cps/redsocks"]; p.Rounds[1] != nil || math.Abs(*p.Min-1.225) > 1e-9 {
		t.Errorf("paired router rate_cps/redsocks = %+v, want round 2 null", p)
	}
	if p := back.Paired[rowRouter]["seq_p50-upstream"]; math.Abs(*p.Median-250) > 1e-9 {
		t.Errorf("paired router seq_p50-upstream = %+v, want median 250", p)
	}
	if _, ok := back.Paired[rowRouter]["tput/router-base"]; !ok {
		t.Error("no router ÷ router-base in the dump")
	}
}

// TestReprint: a report printed again from a -json dump is the report of the run.
func TestReprint(t *testing.T) {
	o, names, res := fixedResults()
	m := meta{Rounds: o.rounds, Size: o.size, Conns: o.conns, Par: o.par, Seq: o.seq, Fetches: o.fetches, Streams: o.streams, Idle: o.idle, Rows: names, Duration: "1s"}
	b, err := json.Marshal(dump(m, names, res))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "run.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var want, got strings.Builder
	header(&want, m)
	report(&want, o, names, res)
	if err := reprint(file, &got); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("reprinted:\n%s\nwant:\n%s", got.String(), want.String())
	}
	if err := os.WriteFile(file, []byte(`{"meta":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := reprint(file, &got); err == nil {
		t.Error("an empty dump: no error")
	}
}

func TestSingboxConfig(t *testing.T) {
	b, err := singboxConfig(12346, "198.51.100.1:1082")
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "log": {
    "level": "error"
  },
  "inbounds": [
    {
      "type": "redirect",
      "tag": "redir-in",
      "listen": "0.0.0.0",
      "listen_port": 12346
    }
  ],
  "outbounds": [
    {
      "type": "socks",
      "tag": "upstream",
      "server": "198.51.100.1",
      "server_port": 1082,
      "version": "5"
    }
  ],
  "route": {
    "final": "upstream"
  }
}
`
	if string(b) != want {
		t.Errorf("got\n%s\nwant\n%s", b, want)
	}
	if _, err := singboxConfig(12346, "no-port"); err == nil {
		t.Error("an upstream without a port: no error")
	}
}

func TestRoundOrderAlternates(t *testing.T) {
	rs := []row{{name: "a"}, {name: "b"}, {name: "c"}}
	if got := rowNames(roundOrder(rs, 0)); strings.Join(got, ",") != "a,b,c" {
		t.Errorf("round 0: %v", got)
	}
	if got := rowNames(roundOrder(rs, 1)); strings.Join(got, ",") != "c,b,a" {
		t.Errorf("round 1: %v", got)
	}
	if rs[0].name != "a" {
		t.Error("roundOrder changed its input")
	}
}

func TestSelectRows(t *testing.T) {
	o := options{singbox: true}
	rs, err := selectRows(o)
	if err != nil || strings.Join(rowNames(rs), ",") != "direct,upstream,redsocks,singbox,router" {
		t.Errorf("default rows = %v, %v", rowNames(rs), err)
	}
	o = options{baseRev: "a498d1d", rows: []string{rowRouter, rowRouterBase, rowRedsocks}}
	rs, err = selectRows(o)
	if err != nil || strings.Join(rowNames(rs), ",") != "redsocks,router-base,router" {
		t.Errorf("-rows router,router-base,redsocks = %v, %v", rowNames(rs), err)
	}
	if _, err := selectRows(options{rows: []string{rowRouterBase}}); err == nil {
		t.Error("router-base without -base: no error")
	}
}

func TestRouterConfigsDoNotCollide(t *testing.T) {
	a, b := routerSpecOf(rowRouter), routerSpecOf(rowRouterBase)
	if a.net == b.net || a.port == b.port || a.dnsPort == b.dnsPort || a.mark == b.mark || a.table == b.table || a.src == b.src {
		t.Errorf("router and router-base share a key: %+v %+v", a, b)
	}
	text := routerConfig(b, upstream, "warn", "/tmp/x.sock", false)
	for _, want := range []string{`vm_networks = ["10.0.4.0/24"]`, "listener_port = 47200", "dns_port = 47253", "mark = 0x524f5555", `table = "router_base"`, `sources = ["10.0.4.0/24"]`,
		`listen = "10.0.4.2:47900"`, `connect = "127.0.0.1:47900"`, `allow = ["10.0.4.0/24"]`} {
		if !strings.Contains(text, want) {
			t.Errorf("config lacks %q:\n%s", want, text)
		}
	}
}

func TestSizeString(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		want string
	}{{1 << 30, "1 GiB"}, {256 << 20, "256 MiB"}, {1000, "1000 B"}} {
		if got := sizeString(tt.n); got != tt.want {
			t.Errorf("sizeString(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

// TestMicroTargets: the decision's p99 at 10,000 rules (the compiled table, not the linear
// oracle) and the fake-IP answer's p50 are judged from go test's lines; a missing line is n/a.
func TestMicroTargets(t *testing.T) {
	lines := []string{
		"BenchmarkDecide/rules=10000/table-2   \t 9405266\t       254.3 ns/op\t       180.0 p50-ns\t       912.0 p99-ns\t       0 B/op\t       0 allocs/op",
		"BenchmarkDecide/rules=10000/linear-2  \t   10000\t    150000 ns/op\t    140000 p50-ns\t    300000 p99-ns",
		"BenchmarkFakeIPAnswer-2   \t   50000\t     40000 ns/op\t        61.5 p50-µs\t       90.0 p99-µs",
	}
	got := strings.Join(microTargets(lines), "\n")
	want := "✓    rule decision p99 ≤ 1 µs, 10,000 rules (the compiled table)  912.0 ns\n✗    fake-IP answer p50 ≤ 50 µs  61.5 µs"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	got = strings.Join(microTargets(lines[1:2]), "\n")
	if !strings.HasPrefix(got, "n/a  rule decision") || !strings.Contains(got, "n/a  fake-IP answer") {
		t.Errorf("without the lines: %s", got)
	}
}
