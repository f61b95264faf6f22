package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of the CPU times in /proc (100 on every Linux port Go
// supports).
const clockTick = 10 * time.Millisecond

// ProcFS reads process and machine figures from a proc file system. The zero value reads
// /proc.
type ProcFS struct {
	Root string // default "/proc"
}

func (p ProcFS) path(parts ...string) string {
	root := p.Root
	if root == "" {
		root = "/proc"
	}
	return filepath.Join(append([]string{root}, parts...)...)
}

// CPU is the CPU time a process used: user+system of all its threads, plus that of its
// waited-for children (utime+stime+cutime+cstime of /proc/PID/stat).
func (p ProcFS) CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(p.path(strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("cpu of %d: %w", pid, err)
	}
	return parseStatCPU(b)
}

// parseStatCPU reads fields 14-17 of a /proc/PID/stat line.
func parseStatCPU(b []byte) (time.Duration, error) {
	// "pid (comm) state ppid ...": comm may hold anything, so cut at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("parse stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, so f[11]..f[14].
	if len(f) < 15 {
		return 0, fmt.Errorf("parse stat: %d fields", len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:15] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse stat: %w", err)
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}

// MachineBusy is the machine's busy CPU time since boot, summed over CPUs: user, nice,
// system, irq, softirq and steal of the "cpu" line of /proc/stat. It includes kernel work no
// process is billed for (softirq, kworkers).
func (p ProcFS) MachineBusy() (time.Duration, error) {
	b, err := os.ReadFile(p.path("stat"))
	if err != nil {
		return 0, fmt.Errorf("machine cpu: %w", err)
	}
	return parseMachineBusy(b)
}

func parseMachineBusy(b []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("parse /proc/stat: first line %q", line)
	}
	var ticks int64
	// user nice system idle iowait irq softirq steal
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/stat: %w", err)
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}

// MachineIRQ is the machine's time in hard and soft interrupts since boot (irq and softirq
// of /proc/stat): network receive work that no process is billed for.
func (p ProcFS) MachineIRQ() (time.Duration, error) {
	b, err := os.ReadFile(p.path("stat"))
	if err != nil {
		return 0, fmt.Errorf("machine irq: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("parse /proc/stat: first line %q", line)
	}
	var ticks int64
	for _, i := range []int{6, 7} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/stat: %w", err)
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}

// KernelThreads is the CPU time of every kernel thread (kthreadd and its children:
// kworkers, ksoftirqd), which carry the network work deferred out of the processes.
func (p ProcFS) KernelThreads() (time.Duration, error) {
	entries, err := os.ReadDir(p.path())
	if err != nil {
		return 0, fmt.Errorf("kernel threads: %w", err)
	}
	var total time.Duration
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(p.path(e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		if e.Name() != "2" && parsePPID(b) != 2 {
			continue
		}
		if d, err := parseStatCPU(b); err == nil {
			total += d
		}
	}
	return total, nil
}

// parsePPID reads field 4 of a /proc/PID/stat line; -1 when it cannot.
func parsePPID(b []byte) int {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return -1
	}
	v, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return v
}

// Mem is a process's memory and descriptor figures.
type Mem struct {
	RSSKiB  int64 // VmRSS
	HWMKiB  int64 // VmHWM, the peak RSS
	Threads int
	FDs     int
	Pipes   int // descriptors that are pipes
	Sockets int // descriptors that are sockets
}

// Mem reads /proc/PID/status and /proc/PID/fd.
func (p ProcFS) Mem(pid int) (Mem, error) {
	b, err := os.ReadFile(p.path(strconv.Itoa(pid), "status"))
	if err != nil {
		return Mem{}, fmt.Errorf("memory of %d: %w", pid, err)
	}
	m, err := parseStatus(b)
	if err != nil {
		return Mem{}, fmt.Errorf("memory of %d: %w", pid, err)
	}
	dir := p.path(strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Mem{}, fmt.Errorf("descriptors of %d: %w", pid, err)
	}
	m.FDs = len(entries)
	for _, e := range entries {
		t, err := os.Readlink(filepath.Join(dir, e.Name()))
		switch {
		case err != nil:
		case strings.HasPrefix(t, "pipe:"):
			m.Pipes++
		case strings.HasPrefix(t, "socket:"):
			m.Sockets++
		}
	}
	return m, nil
}

func parseStatus(b []byte) (Mem, error) {
	var m Mem
	seen := 0
	for line := range bytes.Lines(b) {
		key, val, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		f := strings.Fields(string(val))
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch string(key) {
		case "VmRSS":
			m.RSSKiB, seen = v, seen+1
		case "VmHWM":
			m.HWMKiB = v
		case "Threads":
			m.Threads = int(v)
		}
	}
	if seen == 0 {
		return Mem{}, errors.New("no VmRSS in status")
	}
	return m, nil
}
