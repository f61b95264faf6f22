//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// micro runs the in-process benchmarks of the rule decision and the fake-IP answer from the
// module's root, and prints their lines.
func micro(ctx context.Context, stdout, stderr io.Writer) {
	root, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(root)) == "" || strings.TrimSpace(string(root)) == os.DevNull {
		fmt.Fprintln(stderr, "micro benchmarks skipped: not inside the router module (run from the repository)")
		return
	}
	fmt.Fprintln(stdout, "\nIn-process benchmarks (targets: rule decision p99 <= 1 µs at 10,000 rules; fake-IP answer p50 <= 50 µs):")
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
			}
		}
	}
}
