package proc

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/rules"
)

// cpuNs returns the process's user+system CPU time in nanoseconds.
func cpuNs(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// loop runs fn b.N times and reports, besides wall time, CPU time per op (steadier than
// wall time on a loaded machine).
func loop(b *testing.B, fn func()) {
	start := cpuNs(b)
	n := 0
	for b.Loop() {
		fn()
		n++
	}
	b.ReportMetric(float64(cpuNs(b)-start)/float64(n), "cpu-ns/op")
}

// BenchmarkLookupTCP measures one lookup of a loopback socket of this process:
//   - cached: the inode is in the cache (one sock_diag round trip + one readlink check);
//   - recent-owner: cache emptied, the owner is among the recent PIDs (scan of one fd dir);
//   - full-scan: cache and recent owners emptied (scan of every /proc/PID/fd);
//   - diag-only: the sock_diag round trip alone.
func BenchmarkLookupTCP(b *testing.B) {
	c := loopbackConn(b, "127.0.0.1:0")
	local, remote := tuple(c)
	f := NewLinuxFinder(LinuxFinderConfig{})
	if _, err := f.LookupTCP(local, remote); err != nil {
		b.Fatal(err)
	}
	names, _ := readDirNames("/proc")
	b.Logf("%d /proc entries", len(names))
	check := func(b *testing.B, info rules.Owner, err error) {
		if err != nil || info.PID != os.Getpid() {
			b.Fatalf("LookupTCP = %+v, %v", info, err)
		}
	}
	b.Run("cached", func(b *testing.B) {
		loop(b, func() {
			info, err := f.LookupTCP(local, remote)
			check(b, info, err)
		})
	})
	b.Run("recent-owner", func(b *testing.B) {
		loop(b, func() {
			f.mu.Lock()
			clear(f.cache)
			f.mu.Unlock()
			info, err := f.LookupTCP(local, remote)
			check(b, info, err)
		})
	})
	b.Run("full-scan", func(b *testing.B) {
		loop(b, func() {
			f.mu.Lock()
			clear(f.cache)
			f.recent = f.recent[:0]
			f.mu.Unlock()
			info, err := f.LookupTCP(local, remote)
			check(b, info, err)
		})
	})
	b.Run("diag-only", func(b *testing.B) {
		loop(b, func() {
			if _, _, err := diagTCP(local, remote); err != nil {
				b.Fatal(err)
			}
		})
	})
}
