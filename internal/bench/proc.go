package bench

import (
	"bytes"
	"errors"
	"fmt"
	"math"
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

// MachineCPU is the "cpu" line of /proc/stat: the time all CPUs together spent in each state
// since boot (guest time is already inside User and Nice, so it is not kept apart).
type MachineCPU struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal time.Duration
}

// Busy is the time the CPUs were not idle: user, nice, system, irq, softirq and steal. It
// holds the kernel work no process is billed for (softirq network receive, kworkers, a
// sockmap's redirects) as well as every process's, other work on the machine included.
func (m MachineCPU) Busy() time.Duration {
	return m.User + m.Nice + m.System + m.IRQ + m.SoftIRQ + m.Steal
}

// Sub is the time spent in each state between prev and m (m read later). It does not clamp:
// the kernel lets iowait run backwards, which Busy leaves out.
func (m MachineCPU) Sub(prev MachineCPU) MachineCPU {
	return MachineCPU{
		User: m.User - prev.User, Nice: m.Nice - prev.Nice, System: m.System - prev.System,
		Idle: m.Idle - prev.Idle, IOWait: m.IOWait - prev.IOWait, IRQ: m.IRQ - prev.IRQ,
		SoftIRQ: m.SoftIRQ - prev.SoftIRQ, Steal: m.Steal - prev.Steal,
	}
}

// Machine reads the "cpu" line of /proc/stat.
func (p ProcFS) Machine() (MachineCPU, error) {
	b, err := os.ReadFile(p.path("stat"))
	if err != nil {
		return MachineCPU{}, fmt.Errorf("machine cpu: %w", err)
	}
	return parseMachineCPU(b)
}

// parseMachineCPU reads the first line of /proc/stat, "cpu user nice system idle iowait irq
// softirq steal [guest guest_nice]", in USER_HZ ticks.
func parseMachineCPU(b []byte) (MachineCPU, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return MachineCPU{}, fmt.Errorf("parse /proc/stat: first line %q", line)
	}
	var v [8]time.Duration
	for i := range v {
		t, err := strconv.ParseUint(f[i+1], 10, 63)
		if err != nil {
			return MachineCPU{}, fmt.Errorf("parse /proc/stat: %w", err)
		}
		if t > uint64(math.MaxInt64/clockTick) {
			return MachineCPU{}, fmt.Errorf("parse /proc/stat: %d ticks out of range", t)
		}
		v[i] = time.Duration(t) * clockTick
	}
	return MachineCPU{User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4], IRQ: v[5], SoftIRQ: v[6], Steal: v[7]}, nil
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

// The eBPF map types that redirect socket to socket in the kernel (BPF_MAP_TYPE_SOCKMAP and
// BPF_MAP_TYPE_SOCKHASH of linux/bpf.h).
const (
	bpfMapTypeSockmap  = 15
	bpfMapTypeSockhash = 18
)

// SockMaps is the number of eBPF socket maps (sockmap or sockhash) process pid holds open:
// how the benchmark tells, from outside, that a proxy moves bytes in the kernel.
func (p ProcFS) SockMaps(pid int) (int, error) {
	dir := p.path(strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("descriptors of %d: %w", pid, err)
	}
	n := 0
	for _, e := range entries {
		t, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || t != "anon_inode:bpf-map" {
			continue
		}
		b, err := os.ReadFile(p.path(strconv.Itoa(pid), "fdinfo", e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if typ, ok := parseMapType(b); ok && (typ == bpfMapTypeSockmap || typ == bpfMapTypeSockhash) {
			n++
		}
	}
	return n, nil
}

// parseMapType reads the "map_type:" line of an eBPF map's /proc/PID/fdinfo/FD.
func parseMapType(b []byte) (int, bool) {
	for line := range bytes.Lines(b) {
		key, val, ok := bytes.Cut(line, []byte{':'})
		if !ok || string(key) != "map_type" {
			continue
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(val)))
		return v, err == nil
	}
	return 0, false
}
