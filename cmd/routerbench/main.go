//go:build linux

// Command routerbench measures the router's data path on the lab topology (package lab)
// beside the hypervisor's NAT alone, the upstream SOCKS5 server alone and redsocks, the way
// shared/anchors/perf.md measured the peers: go-socks5 v0.1.0 as the upstream (its own
// process, connecting out from the lab's exit address), a lean sink, every server and every
// load run a process of its own (this binary re-executed), all rows back to back in each
// round, and ratios taken within a round before the median over rounds. The machine may be
// shared with other work: the paired ratios are the figures to read, the absolute ones drift.
//
//	sudo go run ./cmd/routerbench            # 5 rounds, about 3 minutes
//	sudo go run ./cmd/routerbench -quick     # 1 short round, to try the setup
//
// Per round and row: a 1 GiB download (MiB/s; CPU seconds per GiB of the proxy, of the whole
// lab and of the machine), 5,000 connections of 1 KiB 32 at a time (conn/s, proxy CPU per
// connection), 2,000 sequential ones (p50/p99 from connect to EOF), then for each proxy a
// fresh process holding 2,000 and 9,000 idle flows (RSS growth divided by the flows the
// proxy really holds, counted from its sockets). Redsocks holds two splice pipes per flow,
// so it is measured at 2,000 only (6 fds a flow under the 20,000-fd cap); the memory rows go
// through a second go-socks5 with splice off, because go-socks5 itself holds pipes for idle
// flows and could not carry 9,000 of them.
//
// It builds ./cmd/router (or takes -router), needs root, ip, nft, danted (the lab) and
// redsocks, sends nothing outside its own namespaces, stops every process it started by PID
// and removes the namespaces, also on failure and on Ctrl-C.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentcage/router/internal/bench"
	"github.com/agentcage/router/internal/lab"
)

func main() {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "__") {
		os.Exit(helper(os.Args[1], os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	rounds    int
	size      int64
	conns     int
	par       int
	seq       int
	idle      []int
	routerBin string
	routerLog string
	routerEnv []string
	micro     bool
	verbose   bool
	jsonOut   string
	idleWait  time.Duration
	rows      []string // nil: all
	phases    []string
}

func (o options) want(row string) bool { return o.rows == nil || slices.Contains(o.rows, row) }
func (o options) phase(p string) bool  { return slices.Contains(o.phases, p) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("routerbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	quick := fs.Bool("quick", false, "one short round (256 MiB, 1000 connections, 300 sequential, 500 and 2000 idle flows)")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds; every row runs once per round")
	fs.Int64Var(&o.size, "size", 1<<30, "bytes per download")
	fs.IntVar(&o.conns, "conns", 5000, "connections of the rate row")
	fs.IntVar(&o.par, "par", 32, "connections at a time in the rate row")
	fs.IntVar(&o.seq, "seq", 2000, "sequential connections of the latency row")
	idle := fs.String("idle", "2000,9000", "idle flows held per memory row, comma separated (redsocks only up to 2500: its splice pipes need 6 fds a flow)")
	fs.StringVar(&o.routerBin, "router", "", "router binary to measure (default: build ./cmd/router)")
	fs.StringVar(&o.routerLog, "router-log", "warn", "the router's [log] level (info logs one line per flow; redsocks runs with log_info = off)")
	routerEnv := fs.String("router-env", "", "extra environment of the router, comma separated (e.g. GODEBUG=gctrace=1); with -v its output is shown after each idle row")
	fs.BoolVar(&o.micro, "micro", true, "also run BenchmarkDecide (10,000 rules) and BenchmarkFakeIPAnswer")
	fs.BoolVar(&o.verbose, "v", false, "log the setup steps")
	only := fs.String("rows", "", "measure only these rows, comma separated (default all: direct,upstream,redsocks,router); ratios need redsocks")
	phases := fs.String("phases", "get,rate,seq,idle", "which measurements, comma separated")
	fs.DurationVar(&o.idleWait, "idle-wait", 2*time.Second, "how long the idle flows are held before the proxy's memory is read (perf.md: 2 s)")
	fs.StringVar(&o.jsonOut, "json", "", "write every per-round figure to this `file`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *only != "" {
		o.rows = strings.Split(*only, ",")
	}
	o.phases = strings.Split(*phases, ",")
	if *routerEnv != "" {
		o.routerEnv = strings.Split(*routerEnv, ",")
	}
	if *quick {
		o.rounds, o.size, o.conns, o.seq, *idle = 1, 256<<20, 1000, 300, "500,2000"
	}
	for _, s := range strings.Split(*idle, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > 9500 {
			fmt.Fprintf(stderr, "routerbench: -idle %q: want counts from 1 to 9500 (the fd cap is 20,000 a process)\n", s)
			return 2
		}
		o.idle = append(o.idle, n)
	}
	if o.rounds < 1 || o.size < 1 || o.conns < 1 || o.par < 1 || o.seq < 1 {
		fmt.Fprintln(stderr, "routerbench: rounds, size, conns, par and seq must be positive")
		return 2
	}
	if err := runBench(o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "routerbench: %v\n", err)
		return 1
	}
	return 0
}

func runBench(o options, stdout, stderr io.Writer) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, nftables): run it with sudo")
	}
	for _, tool := range []string{"ip", "nft", "danted", "redsocks"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (Debian: apt-get install iproute2 nftables dante-server redsocks): %w", tool, err)
		}
	}
	// Raise the soft descriptor limit explicitly, so that the children (redsocks) inherit
	// it; the Go runtime's own raise is undone for children.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "routerbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.routerBin == "" {
		o.routerBin = filepath.Join(dir, "router")
		fmt.Fprintln(stderr, "building ./cmd/router ...")
		build := exec.CommandContext(ctx, "go", "build", "-o", o.routerBin, "github.com/agentcage/router/cmd/router")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("build router: %w\n%s", err, out)
		}
	}
	logf := func(string, ...any) {}
	if o.verbose {
		logf = func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	}
	start := time.Now()
	w, err := newWorld(ctx, exe, dir, o.routerBin, o.routerLog, o.routerEnv, logf)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := w.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
	}()
	w.idleWait = o.idleWait
	if o.verbose {
		w.debugMem = func(pid int) { printMappings(stderr, pid) }
	}
	res := newResults(o.rounds)
	if err := w.warmUp(ctx); err != nil {
		return err
	}
	for round := range o.rounds {
		if err := w.round(ctx, o, res, round, stderr); err != nil {
			return fmt.Errorf("round %d: %w", round+1, err)
		}
	}
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(res.v, "", " ")
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "routerbench: %d round(s) in %v, %s per download, rows paired within each round; medians of per-round ratios.\n",
		o.rounds, time.Since(start).Round(time.Second), sizeString(o.size))
	report(stdout, o, res)
	if o.micro {
		micro(ctx, stdout, stderr)
	}
	return nil
}

// row is one way of reaching the sink from the guest.
type row struct {
	name  string
	src   string // guest source address
	socks string // the client speaks SOCKS5 to this server itself
	proxy func(*world) *lab.Process
}

func rows() []row {
	return []row{
		{name: "direct", src: srcNAT},
		{name: "upstream", src: srcNAT, socks: upstream},
		{name: "redsocks", src: srcRedsocks, proxy: func(w *world) *lab.Process { return w.redsocks }},
		{name: "router", src: srcRouter, proxy: func(w *world) *lab.Process { return w.router }},
	}
}

// results holds every figure per row, metric and round (NaN: not measured).
type results struct {
	rounds int
	v      map[string]map[string][]float64
}

func newResults(rounds int) *results {
	return &results{rounds: rounds, v: map[string]map[string][]float64{}}
}

func (r *results) set(row, metric string, round int, x float64) {
	m := r.v[row]
	if m == nil {
		m = map[string][]float64{}
		r.v[row] = m
	}
	s := m[metric]
	if s == nil {
		s = make([]float64, r.rounds)
		for i := range s {
			s[i] = math.NaN()
		}
		m[metric] = s
	}
	s[round] = x
}

func (r *results) get(row, metric string) []float64 {
	if s := r.v[row][metric]; s != nil {
		return s
	}
	s := make([]float64, r.rounds)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// usage is CPU time spent so far: by the row's proxy, by the upstream, by the machine, and
// by the lab (every process of the benchmark and the kernel threads; unlike the machine
// figure it leaves out other work sharing the machine, except the interrupts that happen to
// hit that work).
type usage struct{ proxy, up, machine, lab time.Duration }

func (w *world) usage(p *lab.Process) (usage, error) {
	var pfs bench.ProcFS
	var u usage
	var err error
	if p != nil {
		if u.proxy, err = pfs.CPU(p.PID()); err != nil {
			return u, err
		}
	}
	if u.up, err = pfs.CPU(w.socks.PID()); err != nil {
		return u, err
	}
	if u.machine, err = pfs.MachineBusy(); err != nil {
		return u, err
	}
	sink, err := pfs.CPU(w.sink.PID())
	if err != nil {
		return u, err
	}
	kt, err := pfs.KernelThreads()
	if err != nil {
		return u, err
	}
	// Interrupt work is billed to the task it interrupted (stime) as well as to the irq and
	// softirq columns of /proc/stat, so it is already in the processes' figures.
	u.lab = u.proxy + u.up + sink + kt
	return u, nil
}

func (u usage) sub(v usage) usage {
	return usage{proxy: u.proxy - v.proxy, up: u.up - v.up, machine: u.machine - v.machine, lab: u.lab - v.lab}
}

// load runs one load helper in the guest for row r and decodes its JSON answer into out;
// it returns the CPU time spent meanwhile.
func (w *world) load(ctx context.Context, r row, out any, mode string, args ...string) (usage, error) {
	var proxy *lab.Process
	if r.proxy != nil {
		proxy = r.proxy(w)
	}
	full := []string{"netns", "exec", w.lab.Guest().Name(), w.exe, cmdLoad, mode, "-src", r.src}
	if r.socks != "" {
		full = append(full, "-socks", r.socks)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, "ip", full...)
	var stderr lab.TailBuffer
	stderr.Max = 4096
	cmd.Stderr = &stderr
	before, err := w.usage(proxy)
	if err != nil {
		return usage{}, err
	}
	stdout, err := cmd.Output()
	after, uerr := w.usage(proxy)
	if err != nil {
		return usage{}, fmt.Errorf("%s %s: %w: %s", mode, r.name, err, strings.TrimSpace(stderr.String()))
	}
	if uerr != nil {
		return usage{}, uerr
	}
	if ps := cmd.ProcessState; ps != nil {
		after.lab += ps.UserTime() + ps.SystemTime() // the load client
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		return usage{}, fmt.Errorf("%s %s: answer %q: %w", mode, r.name, stdout, err)
	}
	return after.sub(before), nil
}

// warmUp sends a little through every row, so that no row pays for first use.
func (w *world) warmUp(ctx context.Context) error {
	for _, r := range rows() {
		var g bench.GetResult
		if _, err := w.load(ctx, r, &g, "get", "-size", strconv.Itoa(64<<20), sinkBulk); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		var rr bench.RateResult
		if _, err := w.load(ctx, r, &rr, "rate", "-n", "200", "-par", "8", "-size", "1024", sinkConns); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if rr.Errors > 0 {
			return fmt.Errorf("warm-up %s: %d of 200 connections failed: %s", r.name, rr.Errors, rr.FirstError)
		}
	}
	return nil
}

func (w *world) round(ctx context.Context, o options, res *results, round int, log io.Writer) error {
	gib := float64(o.size) / (1 << 30)
	for _, r := range rows() {
		if !o.want(r.name) || !o.phase("get") {
			continue
		}
		var g bench.GetResult
		u, err := w.load(ctx, r, &g, "get", "-size", strconv.FormatInt(o.size, 10), sinkBulk)
		if err != nil {
			return err
		}
		mibs := float64(g.Bytes) / (1 << 20) / g.Seconds
		res.set(r.name, "tput", round, mibs)
		res.set(r.name, "up_gib", round, u.up.Seconds()/gib)
		res.set(r.name, "mach_gib", round, u.machine.Seconds()/gib)
		res.set(r.name, "lab_gib", round, u.lab.Seconds()/gib)
		line := fmt.Sprintf("round %d  %-8s get   %6.0f MiB/s  lab %.2f s/GiB  machine %.2f s/GiB  upstream %.2f s/GiB",
			round+1, r.name, mibs, u.lab.Seconds()/gib, u.machine.Seconds()/gib, u.up.Seconds()/gib)
		if r.proxy != nil {
			res.set(r.name, "cpu_gib", round, u.proxy.Seconds()/gib)
			line += fmt.Sprintf("  proxy %.2f s/GiB", u.proxy.Seconds()/gib)
		}
		fmt.Fprintln(log, line)
	}
	for _, kind := range []struct {
		name     string
		n, par   int
		prefix   string
		describe string
	}{
		{"rate", o.conns, o.par, "rate", "conns"},
		{"seq", o.seq, 1, "seq", "sequential"},
	} {
		for _, r := range rows() {
			if !o.want(r.name) || !o.phase(kind.name) {
				continue
			}
			var rr bench.RateResult
			u, err := w.load(ctx, r, &rr, "rate", "-n", strconv.Itoa(kind.n), "-par", strconv.Itoa(kind.par), "-size", "1024", sinkConns)
			if err != nil {
				return err
			}
			if rr.Errors > 0 {
				return fmt.Errorf("%s %s: %d of %d connections failed: %s", kind.name, r.name, rr.Errors, kind.n, rr.FirstError)
			}
			cps := float64(rr.Count) / rr.Seconds
			res.set(r.name, kind.prefix+"_cps", round, cps)
			res.set(r.name, kind.prefix+"_p50", round, rr.P50)
			res.set(r.name, kind.prefix+"_p99", round, rr.P99)
			res.set(r.name, kind.prefix+"_up_us", round, float64(u.up.Microseconds())/float64(rr.Count))
			res.set(r.name, kind.prefix+"_lab_us", round, float64(u.lab.Microseconds())/float64(rr.Count))
			line := fmt.Sprintf("round %d  %-8s %-5s %6.0f conn/s  p50 %5.0f µs  p99 %6.0f µs  lab %4.0f µs/conn",
				round+1, r.name, kind.name, cps, rr.P50, rr.P99, float64(u.lab.Microseconds())/float64(rr.Count))
			if r.proxy != nil {
				us := float64(u.proxy.Microseconds()) / float64(rr.Count)
				res.set(r.name, kind.prefix+"_cpu_us", round, us)
				line += fmt.Sprintf("  proxy %4.0f µs/conn", us)
			}
			fmt.Fprintln(log, line)
		}
	}
	for _, r := range rows() {
		if r.proxy == nil || !o.want(r.name) || !o.phase("idle") {
			continue
		}
		for _, n := range o.idle {
			if r.name == "redsocks" && n > 2500 {
				continue // conn_max 2500 at 20,000 fds: splice pipes need 6 fds a flow
			}
			before, during, err := w.idleMem(ctx, r, n)
			if err != nil {
				return err
			}
			key := "idle" + strconv.Itoa(n)
			held := (during.Sockets - before.Sockets) / 2
			if held != n {
				fmt.Fprintf(log, "round %d  %-8s idle: %d flows held, not %d\n", round+1, r.name, held, n)
			}
			per := float64(during.RSSKiB-before.RSSKiB) / float64(max(held, 1))
			res.set(r.name, key+"_kib", round, per)
			res.set(r.name, key+"_rss0", round, float64(before.RSSKiB))
			res.set(r.name, key+"_rss", round, float64(during.RSSKiB))
			res.set(r.name, key+"_fds", round, float64(during.FDs))
			res.set(r.name, key+"_pipes", round, float64(during.Pipes))
			res.set(r.name, key+"_threads", round, float64(during.Threads))
			fmt.Fprintf(log, "round %d  %-8s idle  %d flows: RSS %d -> %d KiB (%.1f KiB/flow), %d fds (%d pipes), %d threads\n",
				round+1, r.name, n, before.RSSKiB, during.RSSKiB, per, during.FDs, during.Pipes, during.Threads)
		}
	}
	return nil
}

// idleMem starts a fresh proxy for row r, holds n idle flows through it and reads its
// memory before and while it holds them.
func (w *world) idleMem(ctx context.Context, r row, n int) (before, during bench.Mem, err error) {
	var pfs bench.ProcFS
	p, err := w.restart(ctx, r.name, upstreamIdle)
	if err != nil {
		return before, during, err
	}
	// Back to the bulk upstream afterwards, in a fresh process again.
	defer func() {
		if _, rerr := w.restart(ctx, r.name, upstream); rerr != nil && err == nil {
			err = rerr
		}
	}()
	time.Sleep(500 * time.Millisecond)
	if before, err = pfs.Mem(p.PID()); err != nil {
		return before, during, err
	}
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", w.lab.Guest().Name(), w.exe, cmdLoad, "idle",
		"-src", r.src, "-n", strconv.Itoa(n), "-par", "64", sinkConns)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return before, during, err
	}
	var stderr lab.TailBuffer
	stderr.Max = 4096
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return before, during, err
	}
	if err := cmd.Start(); err != nil {
		return before, during, err
	}
	defer func() {
		stdin.Close()
		if werr := cmd.Wait(); werr != nil && err == nil {
			err = fmt.Errorf("idle %s: %w: %s", r.name, werr, stderr.String())
		}
		// Let the flows drain, at the sink and at the upstream, before the next row.
		if left, perr := w.waitParked(ctx, func(v int64) bool { return v == 0 }, 30*time.Second); perr != nil && err == nil {
			err = fmt.Errorf("idle %s: %d flows still parked at the sink 30 s after the end: %w", r.name, left, perr)
		}
		if ferr := w.waitFDs(ctx, w.socksIdle, 64, 30*time.Second); ferr != nil && err == nil {
			err = fmt.Errorf("idle %s: %w", r.name, ferr)
		}
	}()
	opened := make(chan error, 1)
	go func() {
		var ans struct {
			Open int `json:"open"`
		}
		err := json.NewDecoder(stdout).Decode(&ans)
		if err == nil && ans.Open != n {
			err = fmt.Errorf("%d of %d flows open", ans.Open, n)
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			return before, during, fmt.Errorf("idle %s: %w: %s", r.name, err, stderr.String())
		}
	case <-time.After(3 * time.Minute):
		return before, during, fmt.Errorf("idle %s: flows not open after 3 minutes: %s", r.name, stderr.String())
	case <-ctx.Done():
		return before, during, ctx.Err()
	}
	// A handful of flows may fail under the burst (the upstream is slow to answer): at least
	// 99% must reach the sink, and the figures are per flow the proxy really holds.
	got, err := w.waitParked(ctx, func(v int64) bool { return v >= int64(n) }, time.Minute)
	if err != nil && got < int64(n)*99/100 {
		return before, during, fmt.Errorf("idle %s: %d of %d flows reached the sink: %w\n%s output:\n%s", r.name, got, n, err, r.name, tail(p.Output(), 2000))
	}
	// And every flow that reached the sink is held by the proxy: two sockets each.
	for deadline := time.Now().Add(30 * time.Second); ; {
		m, err := pfs.Mem(p.PID())
		if err != nil {
			return before, during, err
		}
		if m.Sockets-before.Sockets >= 2*int(got) {
			break
		}
		if time.Now().After(deadline) {
			return before, during, fmt.Errorf("idle %s: the proxy holds %d flows of %d\n%s output:\n%s", r.name, (m.Sockets-before.Sockets)/2, got, r.name, tail(p.Output(), 1500))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for waited := time.Duration(0); waited < w.idleWait; waited += time.Second {
		time.Sleep(time.Second)
		if w.debugMem != nil {
			if m, err := pfs.Mem(p.PID()); err == nil {
				w.logf("%s holding %d flows, %v: RSS %d KiB", r.name, n, waited+time.Second, m.RSSKiB)
			}
		}
	}
	during, err = pfs.Mem(p.PID())
	if w.debugMem != nil {
		w.debugMem(p.PID())
		w.logf("%s output:\n%s", r.name, tail(p.Output(), 3000))
	}
	return before, during, err
}

// waitParked polls the sink's parked count until ok says yes or d passes.
func (w *world) waitParked(ctx context.Context, ok func(int64) bool, d time.Duration) (int64, error) {
	dial := func(network, addr string) (net.Conn, error) { return w.lab.Inet().Dial(ctx, network, addr) }
	deadline := time.Now().Add(d)
	var v int64
	for {
		var err error
		v, err = bench.Stat(dial, sinkConns)
		if err == nil && ok(v) {
			return v, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return v, errors.Join(errors.New("timed out"), err, ctx.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFDs waits (bounded) until p holds at most n descriptors.
func (w *world) waitFDs(ctx context.Context, p *lab.Process, n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		entries, err := os.ReadDir("/proc/" + strconv.Itoa(p.PID()) + "/fd")
		if err != nil || len(entries) <= n {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s still holds %d descriptors %v after the flows ended", p.Name, len(entries), d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
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

// micro runs the in-process benchmarks of the rule decision and the fake-IP answer from the
// module's root, and prints their lines.
func micro(ctx context.Context, stdout, stderr io.Writer) {
	root, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(root)) == "" || strings.TrimSpace(string(root)) == os.DevNull {
		fmt.Fprintln(stderr, "micro benchmarks skipped: not inside the router module (run from the repository)")
		return
	}
	fmt.Fprintln(stdout, "\nIn-process benchmarks (SPEC: rule decision p99 <= 1 µs at 10,000 rules; fake-IP answer p50 <= 50 µs):")
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

// printMappings prints the mappings of pid with the most resident memory.
func printMappings(out io.Writer, pid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps")
	if err != nil {
		fmt.Fprintln(out, err)
		return
	}
	type mapping struct {
		name string
		rss  int
	}
	var maps []mapping
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			name := f[0]
			if len(f) >= 6 {
				name += " " + f[5]
			}
			maps = append(maps, mapping{name: name})
		case len(f) >= 2 && f[0] == "Rss:" && len(maps) > 0:
			maps[len(maps)-1].rss, _ = strconv.Atoi(f[1])
		}
	}
	sort.Slice(maps, func(i, j int) bool { return maps[i].rss > maps[j].rss })
	for _, m := range maps[:min(8, len(maps))] {
		fmt.Fprintf(out, "  %8d KiB  %s\n", m.rss, m.name)
	}
}
