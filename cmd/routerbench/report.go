//go:build linux

package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/agentcage/router/internal/bench"
)

// report prints the table (a line per figure, a column per row in names), then router ÷
// router-base when both were measured, then the targets as a checklist. Every ratio and
// difference is taken within a round; the table gives the median over rounds with the
// smallest and largest in brackets. The machine's CPU figures come with what each row adds
// over the ceiling (row upstream: the guest speaks SOCKS itself, no relay in front), and
// that added cost divided by redsocks' added cost in the same round.
func report(out io.Writer, o options, names []string, res *results) {
	has := func(row string) bool { return slices.Contains(names, row) }
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "figure\t"+strings.Join(names, "\t")+"\t")
	line := func(label string, cell func(row string) string) {
		cells := make([]string, len(names))
		empty := true
		for i, n := range names {
			cells[i] = cell(n)
			empty = empty && cells[i] == "–"
		}
		if empty {
			return // a figure of a phase that did not run
		}
		fmt.Fprintln(tw, label+"\t"+strings.Join(cells, "\t")+"\t")
	}
	abs := func(metric string, prec int) func(string) string {
		return func(row string) string { return spreadString(bench.SpreadOf(res.get(row, metric)), prec, false) }
	}
	med := func(metric string, prec int) func(string) string {
		return func(row string) string { return num(bench.Median(res.get(row, metric)), prec) }
	}
	ratio := func(metric, base string) func(string) string {
		return func(row string) string {
			if row == base {
				return unit(res.get(row, metric), "1")
			}
			return spreadString(bench.SpreadOf(bench.PairedRatios(res.get(row, metric), res.get(base, metric))), 2, false)
		}
	}
	diffP := func(metric, base string, prec int) func(string) string {
		return func(row string) string {
			if row == base {
				return unit(res.get(row, metric), "0")
			}
			return spreadString(bench.SpreadOf(bench.PairedDiffs(res.get(row, metric), res.get(base, metric))), prec, true)
		}
	}
	diff := func(metric, base string) func(string) string { return diffP(metric, base, 0) }
	// added: the machine's cost over the ceiling's, and its ratio to redsocks' added cost.
	added := func(metric, unitName string, prec int) {
		if !has(rowUpstream) {
			return
		}
		line("  added over the ceiling "+unitName+" (row − upstream, paired)", diffP(metric, rowUpstream, prec))
		if !has(rowRedsocks) {
			return
		}
		line("  added ÷ redsocks' added (paired)", func(row string) string {
			// Redsocks' and the ceiling's own are 1 and 0, when redsocks' added cost was measured.
			rs := bench.PairedDiffs(res.get(rowRedsocks, metric), res.get(rowUpstream, metric))
			switch row {
			case rowRedsocks:
				return unit(rs, "1")
			case rowUpstream:
				return unit(rs, "0")
			}
			return spreadString(bench.SpreadOf(addedRatios(res, row, metric)), 2, false)
		})
	}
	pairP := func(a, b string, prec int) func(string) string {
		return func(row string) string {
			x, y := bench.Median(res.get(row, a)), bench.Median(res.get(row, b))
			if math.IsNaN(x) && math.IsNaN(y) {
				return "–"
			}
			return num(x, prec) + " / " + num(y, prec)
		}
	}
	pair := func(a, b string) func(string) string { return pairP(a, b, 0) }
	// Ratio lines only against a reference that was measured.
	ratios := func(metric string, bases ...string) {
		for _, b := range bases {
			if has(b) {
				line("  ÷ "+refName(b)+" (paired)", ratio(metric, b))
			}
		}
	}

	line("download MiB/s, "+sizeString(o.size), abs("tput", 0))
	ratios("tput", rowRedsocks, rowUpstream)
	line("proxy CPU s/GiB (its process)", abs("cpu_gib", 2))
	ratios("cpu_gib", rowRedsocks)
	line("machine CPU s/GiB (all CPUs, all work)", abs("mach_gib", 2))
	ratios("mach_gib", rowRedsocks)
	added("mach_gib", "s/GiB", 2)
	line("  of which irq+softirq s/GiB", med("mach_irq_gib", 2))
	line("lab CPU s/GiB (its processes, kthreads)", abs("lab_gib", 2))
	line("upstream (go-socks5) CPU s/GiB", med("up_gib", 2))
	if slices.ContainsFunc(names, func(row string) bool { return bench.Median(res.get(row, "sockmaps")) > 0 }) {
		line("eBPF socket maps held", med("sockmaps", 0))
	}
	for _, k := range []struct{ kind, what string }{
		{"rate", fmt.Sprintf("%d × 1 KiB, %d parallel", o.conns, o.par)},
		{"seq", fmt.Sprintf("%d × 1 KiB, sequential", o.seq)},
	} {
		line("conn/s, "+k.what, abs(k.kind+"_cps", 0))
		ratios(k.kind+"_cps", rowRedsocks, rowUpstream)
		line("  latency p50 / p99 µs", pair(k.kind+"_p50", k.kind+"_p99"))
		if k.kind == "seq" {
			for _, b := range []string{rowUpstream, rowDirect} {
				if has(b) {
					line("  p50 added vs "+refName(b)+" µs (paired)", diff("seq_p50", b))
				}
			}
		}
		line("  proxy CPU µs/conn", abs(k.kind+"_cpu_us", 0))
		ratios(k.kind+"_cpu_us", rowRedsocks)
		line("  machine CPU µs/conn", abs(k.kind+"_mach_us", 0))
		ratios(k.kind+"_mach_us", rowRedsocks)
		added(k.kind+"_mach_us", "µs/conn", 0)
		line("  lab CPU µs/conn", med(k.kind+"_lab_us", 0))
	}
	// The agent's workload: the package-manager burst, the streamed model reply, and the
	// download of phase get again, as seconds.
	line(fmt.Sprintf("agent: %d HTTPS fetches, %d parallel, wall s", o.fetches, fetchPar), abs("agent_wall", 2))
	ratios("agent_wall", rowRedsocks, rowUpstream)
	line("  per fetch p50 / p99 ms", pairP("agent_p50", "agent_p99", 1))
	line("  machine CPU s", abs("agent_mach_s", 2))
	line("  proxy CPU s", abs("agent_cpu_s", 2))
	line(fmt.Sprintf("agent: model stream, %d × %d events %v apart: path", o.streams, streamEvents, streamGap), func(row string) string {
		if math.IsNaN(bench.Median(res.get(row, "model_ttfb_p50"))) {
			return "–"
		}
		if _, forward := modelAt(row); forward {
			return "the forward"
		}
		return "no forward"
	})
	line("  TTFB p50 / p99 µs", pair("model_ttfb_p50", "model_ttfb_p99"))
	if has(rowUpstream) {
		line("  TTFB p50 added vs upstream's µs (paired)", diff("model_ttfb_p50", rowUpstream))
	}
	line("  gap between events p50 / p99 µs", pair("model_gap_p50", "model_gap_p99"))
	line("  event latency p50 / p99 µs", pair("model_lat_p50", "model_lat_p99"))
	if slices.ContainsFunc(names, func(row string) bool { return !math.IsNaN(bench.Median(res.get(row, "agent_wall"))) }) {
		line("agent: the download of phase get, s", func(row string) string {
			return spreadString(bench.SpreadOf(getSeconds(o, res, row)), 2, false)
		})
		line("agent: HTTPS burst + download, s", func(row string) string {
			return spreadString(bench.SpreadOf(sum(res.get(row, "agent_wall"), getSeconds(o, res, row))), 2, false)
		})
	}
	for _, n := range o.idle {
		key := "idle" + strconv.Itoa(n)
		line(fmt.Sprintf("RSS KiB per idle flow, %d flows", n), abs(key+"_kib", 1))
		line("  RSS KiB at rest → holding", func(row string) string {
			a, b := bench.Median(res.get(row, key+"_rss0")), bench.Median(res.get(row, key+"_rss"))
			if math.IsNaN(a) {
				return "–"
			}
			return num(a, 0) + " → " + num(b, 0)
		})
		line("  fds (pipes), threads", func(row string) string {
			f := bench.Median(res.get(row, key+"_fds"))
			if math.IsNaN(f) {
				return "–"
			}
			return fmt.Sprintf("%s (%s), %s", num(f, 0), num(bench.Median(res.get(row, key+"_pipes")), 0), num(bench.Median(res.get(row, key+"_threads")), 0))
		})
	}
	tw.Flush()
	if has(rowRouter) && has(rowRouterBase) {
		reportBase(out, o, res)
	}
	checklist(out, o, names, res)
}

// addedRatios is, per round, what row adds to metric over the ceiling (row upstream) divided
// by what redsocks adds in the same round: (row − upstream) ÷ (redsocks − upstream).
func addedRatios(res *results, row, metric string) []float64 {
	up := res.get(rowUpstream, metric)
	return bench.PairedRatios(bench.PairedDiffs(res.get(row, metric), up), bench.PairedDiffs(res.get(rowRedsocks, metric), up))
}

// getSeconds is, per round, how long row's download of phase get took, in seconds.
func getSeconds(o options, res *results, row string) []float64 {
	v := res.get(row, "tput")
	s := make([]float64, len(v))
	for i, mibs := range v {
		s[i] = float64(o.size) / (1 << 20) / mibs // NaN stays NaN
	}
	return s
}

// sum is a[i]+b[i] per round, NaN where either is missing.
func sum(a, b []float64) []float64 {
	r := make([]float64, min(len(a), len(b)))
	for i := range r {
		r[i] = a[i] + b[i]
	}
	return r
}

// unit is what a row paired with itself shows: one, when it was measured.
func unit(v []float64, one string) string {
	if math.IsNaN(bench.Median(v)) {
		return "–"
	}
	return one
}

// refName is how a reference row is named in a ratio line.
func refName(row string) string {
	switch row {
	case rowUpstream:
		return "upstream alone"
	case rowDirect:
		return "direct NAT"
	}
	return row
}

// reportBase prints router ÷ router-base, figure by figure: the median of the per-round
// ratios, their range, and each round's.
func reportBase(out io.Writer, o options, res *results) {
	fmt.Fprintf(out, "\nrouter ÷ router-base (paired within each round; median (min–max), then each round):\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "figure\trouter ÷ router-base\trounds\t")
	// signed: a difference, every figure with its sign.
	line := func(label string, v []float64, prec int, signed bool) {
		if bench.SpreadOf(v).N == 0 {
			return // a figure of a phase that did not run
		}
		rounds := make([]string, len(v))
		for i, x := range v {
			rounds[i] = spreadString(bench.SpreadOf([]float64{x}), prec, signed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", label, spreadString(bench.SpreadOf(v), prec, signed), strings.Join(rounds, " "))
	}
	row := func(label string, v []float64, prec int) { line(label, v, prec, false) }
	r := func(metric string) []float64 {
		return bench.PairedRatios(res.get(rowRouter, metric), res.get(rowRouterBase, metric))
	}
	row("download MiB/s", r("tput"), 3)
	row("proxy CPU s/GiB", r("cpu_gib"), 3)
	row("machine CPU s/GiB", r("mach_gib"), 3)
	for _, k := range []struct{ kind, what string }{{"rate", fmt.Sprintf("%d parallel", o.par)}, {"seq", "sequential"}} {
		row("conn/s, "+k.what, r(k.kind+"_cps"), 3)
		row("  proxy CPU µs/conn", r(k.kind+"_cpu_us"), 3)
		row("  machine CPU µs/conn", r(k.kind+"_mach_us"), 3)
	}
	// The added latency is a difference of a few hundred µs between noisy latencies; a ratio
	// of two such differences runs wild when one comes near zero, so the latencies are
	// compared as ratios and the added part as router's minus router-base's, in µs (the
	// upstream alone cancels out of it).
	for _, p := range []string{"p50", "p99"} {
		row("latency "+p+", sequential", r("seq_"+p), 3)
	}
	for _, p := range []string{"p50", "p99"} {
		line("  "+p+" added, router − router-base (µs)", bench.PairedDiffs(res.get(rowRouter, "seq_"+p), res.get(rowRouterBase, "seq_"+p)), 0, true)
	}
	for _, n := range o.idle {
		row(fmt.Sprintf("RSS KiB per idle flow, %d flows", n), r("idle"+strconv.Itoa(n)+"_kib"), 3)
	}
	tw.Flush()
}

// checklist prints the performance targets with ✓ (met), ✗ (missed) or n/a (not measured,
// or not applicable). The router's targets against redsocks and the ceiling say how many
// rounds met each; those marked "every round" are met only when every measured round meets
// them, the others when the median does.
func checklist(out io.Writer, o options, names []string, res *results) {
	has := func(row string) bool { return slices.Contains(names, row) }
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	// judge prints one target: v per round, ok the test of one figure. every: met only when
	// every measured round is; otherwise the median judges. counted: always say how many
	// rounds met it; otherwise only when the rounds disagree with the verdict, so that a
	// verdict noise could flip shows as one.
	judge := func(target string, v []float64, prec int, signed bool, ok func(float64) bool, na string, every, counted bool) {
		s := bench.SpreadOf(v)
		met := countMet(v, ok)
		mark := "✗"
		switch {
		case na != "":
			mark = "n/a"
		case math.IsNaN(s.Median):
			mark, na = "n/a", "not measured"
		case every && met == s.N, !every && ok(s.Median):
			mark = "✓"
		}
		value := spreadString(s, prec, signed)
		switch {
		case na != "":
			value += "  (" + na + ")"
		case counted:
			value += fmt.Sprintf("  (%d of %d rounds meet it)", met, s.N)
		case met != 0 && met != s.N:
			value += fmt.Sprintf("  (%d of %d rounds meet it)", met, s.N)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, target, value)
	}
	item := func(target string, v []float64, prec int, signed bool, ok func(float64) bool, na string) {
		judge(target, v, prec, signed, ok, na, false, false)
	}
	r := func(metric, base string) []float64 {
		return bench.PairedRatios(res.get(rowRouter, metric), res.get(base, metric))
	}
	fmt.Fprintln(out, "\nTargets: the router against redsocks and the ceiling (the upstream alone); medians of per-round figures, min–max; machine-wide CPU:")
	na := func(rows ...string) string {
		for _, row := range append([]string{rowRouter}, rows...) {
			if !has(row) {
				return "no " + row + " row"
			}
		}
		return ""
	}
	atLeast := func(x float64) func(float64) bool { return func(v float64) bool { return v >= x } }
	atMost := func(x float64) func(float64) bool { return func(v float64) bool { return v <= x } }
	target := func(label string, v []float64, prec int, signed bool, ok func(float64) bool, na string, every bool) {
		judge(label, v, prec, signed, ok, na, every, true)
	}
	target("throughput ≥ 1.25 × redsocks, every round", r("tput", rowRedsocks), 2, false, atLeast(1.25), na(rowRedsocks), true)
	target("throughput ≥ 0.95 × the ceiling", r("tput", rowUpstream), 2, false, atLeast(0.95), na(rowUpstream), false)
	for _, c := range []struct{ metric, what string }{
		{"mach_gib", "per GiB"},
		{"rate_mach_us", fmt.Sprintf("per connection, %d parallel", o.par)},
		{"seq_mach_us", "per connection, sequential"},
	} {
		target("machine CPU added over the ceiling "+c.what+" ≤ 0.50 × redsocks' added", addedRatios(res, rowRouter, c.metric), 2, false, atMost(0.5), na(rowRedsocks, rowUpstream), false)
	}
	target("proxy CPU per GiB ≤ 0.50 × redsocks'", r("cpu_gib", rowRedsocks), 2, false, atMost(0.5), na(rowRedsocks), false)
	target(fmt.Sprintf("conn/s (%d parallel) ≥ 1.20 × redsocks, every round", o.par), r("rate_cps", rowRedsocks), 2, false, atLeast(1.2), na(rowRedsocks), true)
	target(fmt.Sprintf("conn/s (%d parallel) ≥ 0.90 × the ceiling", o.par), r("rate_cps", rowUpstream), 2, false, atLeast(0.9), na(rowUpstream), false)
	target("added p50 latency ≤ 50 µs over the ceiling (sequential, router − upstream)",
		bench.PairedDiffs(res.get(rowRouter, "seq_p50"), res.get(rowUpstream, "seq_p50")), 0, true, atMost(50), na(rowUpstream), false)
	// The workload's wall time is the HTTPS burst's: the one part that crosses every row's
	// relay the same way (the model stream goes through a forward only in the router rows).
	target("agent's HTTPS burst ≥ 1.20 × faster than redsocks (redsocks ÷ router wall time)",
		bench.PairedRatios(res.get(rowRedsocks, "agent_wall"), res.get(rowRouter, "agent_wall")), 2, false, atLeast(1.2), na(rowRedsocks), false)
	target("agent's HTTPS burst within 10 % of the ceiling (router ÷ upstream wall time ≤ 1.10)", r("agent_wall", rowUpstream), 2, false, atMost(1.1), na(rowUpstream), false)
	for _, n := range o.idle {
		item(fmt.Sprintf("≤ 8 KiB per idle flow, %d flows", n), res.get(rowRouter, "idle"+strconv.Itoa(n)+"_kib"), 1, false, atMost(8), na())
	}
	tw.Flush()
	if !has(rowRouter) || !has(rowRouterBase) {
		return
	}
	b := func(metric string) []float64 { return r(metric, rowRouterBase) }
	if o.names {
		// The rows differ only in the config: the allow-list by name reads each flow's first
		// bytes for its name; the catch-all does not.
		fmt.Fprintln(out, "\nReading names costs ≤ 3 % of the connection rate and ≤ 20 µs p50 (router ÷ router-base, medians of per-round figures, min–max):")
		item("conn/s (32 parallel) ≥ 0.97 × router-base", b("rate_cps"), 3, false, func(x float64) bool { return x >= 0.97 }, "")
		item("conn/s (sequential) ≥ 0.97 × router-base", b("seq_cps"), 3, false, func(x float64) bool { return x >= 0.97 }, "")
		item("added p50 latency ≤ 20 µs (sequential, router − router-base)",
			bench.PairedDiffs(res.get(rowRouter, "seq_p50"), res.get(rowRouterBase, "seq_p50")), 0, true, func(x float64) bool { return x <= 20 }, "")
		tw.Flush()
		return
	}
	fmt.Fprintln(out, "\nThe change costs ≤ 2 % (router ÷ router-base, medians of per-round ratios, min–max):")
	item("throughput ≥ 0.98 × router-base", b("tput"), 3, false, func(x float64) bool { return x >= 0.98 }, "")
	item("proxy CPU per GiB ≤ 1.02 × router-base", b("cpu_gib"), 3, false, func(x float64) bool { return x <= 1.02 }, "")
	item("machine CPU per GiB ≤ 1.02 × router-base", b("mach_gib"), 3, false, func(x float64) bool { return x <= 1.02 }, "")
	tw.Flush()
}

// countMet is how many of the measured values in v ok accepts.
func countMet(v []float64, ok func(float64) bool) int {
	n := 0
	for _, x := range v {
		if !math.IsNaN(x) && ok(x) {
			n++
		}
	}
	return n
}

// spreadString is "median (min–max)", or the median alone when it was taken over one value;
// "–" when there is none. signed puts a sign on every figure.
func spreadString(s bench.Spread, prec int, signed bool) string {
	f := func(x float64) string {
		if signed && !math.IsNaN(x) {
			return signedNum(x, prec)
		}
		return num(x, prec)
	}
	switch {
	case s.N == 0:
		return "–"
	case s.N == 1:
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

func signedNum(x float64, prec int) string {
	s := strconv.FormatFloat(x, 'f', prec, 64)
	if strings.Trim(s, "-0.") == "" {
		return strings.TrimPrefix(s, "-") // zero has no sign: -0.00 → 0.00
	}
	if !strings.HasPrefix(s, "-") {
		s = "+" + s
	}
	return s
}

func num(x float64, prec int) string {
	if math.IsNaN(x) {
		return "–"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

func sizeString(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
