//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// micro runs the in-process benchmarks of the rule decision and the fake-IP answer from the
// module's root, and prints their lines and their targets as ✓/✗ (microTargets).
func micro(ctx context.Context, stdout, stderr io.Writer) {
	root, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(root)) == "" || strings.TrimSpace(string(root)) == os.DevNull {
		fmt.Fprintln(stderr, "micro benchmarks skipped: not inside the router module (run from the repository)")
		return
	}
	fmt.Fprintln(stdout, "\nIn-process benchmarks (targets: rule decision p99 <= 1 µs at 10,000 rules; fake-IP answer p50 <= 50 µs):")
	var lines []string
	for _, b := range []struct{ pkg, pattern string }{
		{"./rules/", "BenchmarkDecide/rules=10000/"},
		{"./dns/", "BenchmarkFakeIPAnswer$"},
	} {
		cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", b.pattern, "-benchtime", "2s", b.pkg)
		cmd.Dir = filepath.Dir(strings.TrimSpace(string(root)))
		out, err := cmd.CombinedOutput()
		if err != nil {
			fmt.Fprintf(stdout, "  %s: %v\n%s", b.pkg, err, out)
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "Benchmark") {
				fmt.Fprintln(stdout, "  "+strings.Join(strings.Fields(line), " "))
				lines = append(lines, line)
			}
		}
	}
	for _, t := range microTargets(lines) {
		fmt.Fprintln(stdout, "  "+t)
	}
}

// microTargets judges the benchmark lines: the compiled table's decision p99 at 10,000 rules
// (its p99-ns metric) ≤ 1,000 ns, the fake-IP answer's p50 (p50-µs) ≤ 50 µs; a target whose
// line or metric is missing is n/a.
func microTargets(lines []string) []string {
	targets := []struct {
		label, bench, metric string
		limit                float64
		unit                 string
	}{
		{"rule decision p99 ≤ 1 µs, 10,000 rules (the compiled table)", "BenchmarkDecide/rules=10000/table", "p99-ns", 1000, "ns"},
		{"fake-IP answer p50 ≤ 50 µs", "BenchmarkFakeIPAnswer", "p50-µs", 50, "µs"},
	}
	var out []string
	for _, t := range targets {
		verdict := "n/a  " + t.label + "  (not measured)"
		for _, line := range lines {
			fs := strings.Fields(line)
			if len(fs) == 0 || !benchNameIs(fs[0], t.bench) {
				continue
			}
			for i := 1; i+1 < len(fs); i++ {
				if fs[i+1] != t.metric {
					continue
				}
				v, err := strconv.ParseFloat(fs[i], 64)
				if err != nil {
					continue
				}
				mark := "✗"
				if v <= t.limit {
					mark = "✓"
				}
				verdict = fmt.Sprintf("%s    %s  %s %s", mark, t.label, fs[i], t.unit)
			}
		}
		out = append(out, verdict)
	}
	return out
}

// benchNameIs reports whether a benchmark line's name is name, with or without the
// "-GOMAXPROCS" suffix go test adds.
func benchNameIs(field, name string) bool {
	rest, ok := strings.CutPrefix(field, name)
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	_, err := strconv.Atoi(strings.TrimPrefix(rest, "-"))
	return strings.HasPrefix(rest, "-") && err == nil
}
