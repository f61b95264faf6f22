//go:build linux

package main

import (
	"strings"
	"testing"
)

// TestReportPairsWithinRounds: ratios are medians of per-round ratios, not ratios of
// medians, and the targets are judged on them.
func TestReportPairsWithinRounds(t *testing.T) {
	o := options{rounds: 3, size: 1 << 30, conns: 5000, par: 32, seq: 2000, idle: []int{2000}}
	res := newResults(3)
	// A loaded second round slows both rows: the paired ratio stays 1.5.
	for i, v := range []float64{600, 300, 620} {
		res.set("redsocks", "tput", i, v)
		res.set("router", "tput", i, 1.5*v)
		res.set("redsocks", "cpu_gib", i, 1.0)
		res.set("router", "cpu_gib", i, 0.4)
		res.set("redsocks", "seq_p50", i, 800)
		res.set("router", "seq_p50", i, 750)
		res.set("upstream", "seq_p50", i, 500)
	}
	res.set("router", "idle2000_kib", 0, 3.5)
	var b strings.Builder
	report(&b, o, res)
	out := b.String()
	for _, want := range []string{
		"download MiB/s, 1 GiB",
		"900 (450–930)", // router's median and range
		"throughput ÷ redsocks                     |≥ 1.25  |1.50      |yes  |",
		"proxy CPU per GiB ÷ redsocks              |≤ 0.50  |0.40      |yes  |",
		"added p50 minus redsocks' added p50 (µs)  |≤ 0     |-50       |yes  |",
		"RSS per idle flow at 2000 flows (KiB)     |≤ 8     |3.5       |yes  |",
		"conn/s ÷ redsocks                         |≥ 1.20  |–         |–    |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
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
