//go:build linux

package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/agentcage/router/internal/bench"
)

// report prints one table: a line per figure, a column per row, then the targets.
func report(out io.Writer, o options, res *results) {
	names := make([]string, 0, 4)
	for _, r := range rows() {
		names = append(names, r.name)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	header := "figure\t" + strings.Join(names, "\t") + "\t"
	fmt.Fprintln(tw, header)
	line := func(label string, cell func(row string) string) {
		cells := make([]string, len(names))
		for i, n := range names {
			cells[i] = cell(n)
		}
		fmt.Fprintln(tw, label+"\t"+strings.Join(cells, "\t")+"\t")
	}
	medRange := func(metric string, prec int) func(string) string {
		return func(row string) string {
			v := res.get(row, metric)
			m := bench.Median(v)
			if math.IsNaN(m) {
				return "–"
			}
			if o.rounds == 1 {
				return num(m, prec)
			}
			lo, hi := bench.Range(v)
			return fmt.Sprintf("%s (%s–%s)", num(m, prec), num(lo, prec), num(hi, prec))
		}
	}
	med := func(metric string, prec int) func(string) string {
		return func(row string) string { return num(bench.Median(res.get(row, metric)), prec) }
	}
	ratio := func(metric, base string) func(string) string {
		return func(row string) string {
			return num(bench.PairedRatio(res.get(row, metric), res.get(base, metric)), 2)
		}
	}
	diff := func(metric, base string) func(string) string {
		return func(row string) string {
			d := bench.PairedDiff(res.get(row, metric), res.get(base, metric))
			if math.IsNaN(d) {
				return "–"
			}
			return fmt.Sprintf("%+.0f", d)
		}
	}
	size := sizeString(o.size)
	line("download MiB/s, "+size, medRange("tput", 0))
	line("  ÷ redsocks (paired)", ratio("tput", "redsocks"))
	line("  ÷ upstream alone (paired)", ratio("tput", "upstream"))
	line("proxy CPU s/GiB", medRange("cpu_gib", 2))
	line("  ÷ redsocks (paired)", ratio("cpu_gib", "redsocks"))
	line("lab CPU s/GiB (its processes and kthreads)", medRange("lab_gib", 2))
	line("  ÷ redsocks (paired)", ratio("lab_gib", "redsocks"))
	line("whole-machine CPU s/GiB (other work too)", medRange("mach_gib", 2))
	line("upstream (go-socks5) CPU s/GiB", med("up_gib", 2))
	line(fmt.Sprintf("conn/s, %d × 1 KiB, %d parallel", o.conns, o.par), medRange("rate_cps", 0))
	line("  ÷ redsocks (paired)", ratio("rate_cps", "redsocks"))
	line("  p50 / p99 µs", func(row string) string {
		return num(bench.Median(res.get(row, "rate_p50")), 0) + " / " + num(bench.Median(res.get(row, "rate_p99")), 0)
	})
	line("proxy CPU µs/conn, parallel", medRange("rate_cpu_us", 0))
	line("  ÷ redsocks (paired)", ratio("rate_cpu_us", "redsocks"))
	line("lab CPU µs/conn, parallel", med("rate_lab_us", 0))
	line(fmt.Sprintf("latency p50 / p99 µs, %d sequential", o.seq), func(row string) string {
		return num(bench.Median(res.get(row, "seq_p50")), 0) + " / " + num(bench.Median(res.get(row, "seq_p99")), 0)
	})
	line("  p50 added vs upstream alone (paired)", diff("seq_p50", "upstream"))
	line("  p50 added vs direct (paired)", diff("seq_p50", "direct"))
	line("proxy CPU µs/conn, sequential", medRange("seq_cpu_us", 0))
	line("  ÷ redsocks (paired)", ratio("seq_cpu_us", "redsocks"))
	for _, n := range o.idle {
		key := "idle" + strconv.Itoa(n)
		line(fmt.Sprintf("RSS KiB per idle flow, %d flows", n), medRange(key+"_kib", 1))
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

	fmt.Fprintln(out, "\nTargets, router against redsocks (paired medians; figures, not a pass/fail test):")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "target\twant\tmeasured\tmet\t")
	target := func(name, want string, got float64, ok bool, prec int) {
		met := "no"
		switch {
		case math.IsNaN(got) || want == "–":
			met = "–"
		case ok:
			met = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", name, want, num(got, prec), met)
	}
	r := func(metric, base string) float64 {
		return bench.PairedRatio(res.get("router", metric), res.get(base, metric))
	}
	t := r("tput", "redsocks")
	target("throughput ÷ redsocks", "≥ 1.25", t, t >= 1.25, 2)
	t = r("tput", "upstream")
	target("throughput ÷ upstream alone (stretch)", "≥ 0.90", t, t >= 0.9, 2)
	t = r("cpu_gib", "redsocks")
	target("proxy CPU per GiB ÷ redsocks", "≤ 0.50", t, t <= 0.5, 2)
	t = r("lab_gib", "redsocks")
	target("lab CPU per GiB ÷ redsocks (context)", "–", t, false, 2)
	t = r("rate_cps", "redsocks")
	target("conn/s ÷ redsocks", "≥ 1.20", t, t >= 1.2, 2)
	t = bench.PairedDiff(res.get("router", "seq_p50"), res.get("redsocks", "seq_p50"))
	target("added p50 minus redsocks' added p50 (µs)", "≤ 0", t, t <= 0, 0)
	for _, n := range o.idle {
		t = bench.Median(res.get("router", "idle"+strconv.Itoa(n)+"_kib"))
		target(fmt.Sprintf("RSS per idle flow at %d flows (KiB)", n), "≤ 8", t, t <= 8, 1)
	}
	tw.Flush()
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
