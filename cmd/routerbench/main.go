//go:build linux

// Command routerbench measures the router's data path on the lab topology (package lab) beside
// the hypervisor's NAT alone, the upstream SOCKS5 server alone, redsocks and sing-box, the way
// the project's performance study measured the peers: go-socks5 v0.1.0 as the upstream (its
// own process, connecting out from the lab's exit address), a lean sink, every server and
// every load run a process of its own (this binary re-executed), all rows back to back in
// each round (in reverse order every other round), and ratios taken within a round before
// the median over rounds, printed with their smallest and largest. The machine may be shared
// with other work: the paired ratios are the figures to read, the absolute ones drift.
//
//	sudo go run ./cmd/routerbench                          # 5 rounds, about 5 minutes
//	sudo go run ./cmd/routerbench -quick                   # 1 short round, to try the setup
//	sudo go run ./cmd/routerbench -base-rev a498d1d        # adds row router-base: that commit
//	sudo go run ./cmd/routerbench -base-rev HEAD~1 -rows router,router-base,redsocks
//	sudo go run ./cmd/routerbench -names -rounds 31 -conns 2000 -seq 600   # what reading names costs, paired
//	sudo go run ./cmd/routerbench -rounds 1 -phases agent                  # the agent's workload alone
//
// Per round and row: a 1 GiB download (MiB/s; CPU seconds per GiB of the proxy process, of
// the whole machine, of the lab), 5,000 connections of 1 KiB 32 at a time and 2,000 one at a
// time (conn/s, p50/p99 from connect to EOF, CPU µs per connection of the proxy and of the
// machine), then for each proxy a fresh process holding 2,000 and 9,000 idle flows (RSS
// growth divided by the flows the proxy really holds, counted from its sockets). Redsocks and
// sing-box hold two splice pipes per flow, so they are measured at 2,000 only (6 fds a flow
// under the 20,000-fd cap); the memory rows go through a second go-socks5 with splice off,
// because go-socks5 itself holds pipes for idle flows and could not carry 9,000 of them.
//
// Phase agent replays what a coding agent does through the cage, for every row but direct
// (row upstream is the ceiling: the client speaks SOCKS itself): a package-manager burst of
// 1,000 HTTPS fetches (-fetches) of 2–200 KiB (log-uniform, from a fixed seed: the same
// files for every row) from a TLS server beside the sink, whose self-signed certificate is
// made at start and is the one the client trusts, 16 at a time, each a new TCP connection and
// a full handshake (no keep-alive, no session resumption): its wall time, p50/p99 per fetch
// and CPU; then 30 streamed model replies (-streams) of 40 events 2 ms apart, one after
// another on a keep-alive connection, from a fake OpenAI-compatible server in the host: a
// router row reaches it through its [[forward]], the others straight at the server's
// address on the host's VM-facing side (no forward, the reference), and the report says
// which: time to the first event, the gaps between events and each event's latency from
// the server's write (p50/p99). The workload's summary adds the download of phase get, in
// seconds.
//
// Besides each figure, the table gives the machine's CPU per GiB and per connection that a
// row adds over the ceiling (row − upstream, paired within each round), and that added cost
// divided by redsocks' added cost in the same round (the median of the per-round ratios).
//
// CPU: a process's figure is utime+stime (+ waited-for children) from /proc/PID/stat; the
// machine's is the busy time of the "cpu" line of /proc/stat (user, nice, system, irq,
// softirq, steal, summed over every CPU), so kernel work no process is billed for (softirq
// receive, a sockmap's redirects) counts, and so does other work on a shared machine. Both
// are read before and after each load run.
//
// Rows: direct (NAT), upstream (the guest speaks SOCKS itself), redsocks (Debian's), singbox
// (sing-box -singbox-version, built with `go install` from its module into the user's cache
// directory the first time; -singbox=false leaves it out), router (./cmd/router of this tree,
// or -router BIN) and, with -base BIN or -base-rev REV (git archive of that commit, built in
// a scratch directory), router-base: a second build measured exactly like router, for
// router ÷ router-base. The report ends with the performance targets as a checklist: each
// with how many rounds met it, the ones against redsocks' throughput and connection rate
// met only when every round meets them; the in-process benchmarks' targets follow them.
//
// -names measures what reading a flow's name costs: row router runs an allow-list by name
// (one rule, hosts = ["sink.test"]), row router-base the same build with the catch-all
// rule; both rows' connections go to the fake IP their router's DNS gave sink.test, with
// the sink's HTTP/1.1 request naming it, so both hand the proxy the same name and only the
// wait for the first bytes and their reading differ (router ÷ router-base: conn/s, and the
// added p50, router − router-base).
//
// It needs root, ip, nft, danted (the lab), redsocks and go, sends nothing outside its own
// namespaces, stops every process it started by PID and removes the namespaces, also on
// failure and on Ctrl-C.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
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
	fetches   int // the agent's HTTPS fetches per burst
	streams   int // the agent's streamed model replies per row and round
	idle      []int
	routerBin string
	baseBin   string // -base: a second router build, measured as row router-base
	baseRev   string // -base-rev: the git revision to build it from
	singbox   bool
	singboxV  string
	routerLog string
	routerEnv []string
	micro     bool
	names     bool // -names: row router allows by name, router-base is the catch-all
	verbose   bool
	jsonOut   string
	idleWait  time.Duration
	rows      []string // nil: all
	phases    []string
}

func (o options) want(row string) bool { return o.rows == nil || slices.Contains(o.rows, row) }
func (o options) hasBase() bool        { return o.baseBin != "" || o.baseRev != "" || o.names }
func (o options) phase(p string) bool  { return slices.Contains(o.phases, p) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("routerbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	quick := fs.Bool("quick", false, "one short round (256 MiB, 1000 connections, 300 sequential, 500 and 2000 idle flows, 300 fetches, 10 streams)")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds; every row runs once per round")
	fs.Int64Var(&o.size, "size", 1<<30, "bytes per download")
	fs.IntVar(&o.conns, "conns", 5000, "connections of the rate row")
	fs.IntVar(&o.par, "par", 32, "connections at a time in the rate row")
	fs.IntVar(&o.seq, "seq", 2000, "sequential connections of the latency row")
	fs.IntVar(&o.fetches, "fetches", 1000, "agent: HTTPS fetches of the package-manager burst (2–200 KiB each, 16 at a time, a new connection and handshake each)")
	fs.IntVar(&o.streams, "streams", 30, "agent: streamed model replies per row and round (one keep-alive connection)")
	idle := fs.String("idle", "2000,9000", "idle flows held per memory row, comma separated (redsocks only up to 2500: its splice pipes need 6 fds a flow)")
	fs.StringVar(&o.routerBin, "router", "", "router binary to measure (default: build ./cmd/router)")
	fs.StringVar(&o.baseBin, "base", "", "a second router `binary`, measured as row router-base exactly like router in every round; the report adds router ÷ router-base")
	fs.StringVar(&o.baseRev, "base-rev", "", "like -base, built from ./cmd/router at this git `revision` (git archive into a scratch directory)")
	fs.BoolVar(&o.singbox, "singbox", true, "measure sing-box (built with go install from its module into the user's cache directory the first time) as row singbox")
	fs.StringVar(&o.singboxV, "singbox-version", "v1.14.1", "the sing-box module version to build")
	fs.StringVar(&o.routerLog, "router-log", "warn", "the router's [log] level (info logs one line per flow; redsocks runs with log_info = off)")
	routerEnv := fs.String("router-env", "", "extra environment of both router builds, comma separated (e.g. GODEBUG=gctrace=1); with -v its output is shown after each idle row")
	fs.BoolVar(&o.micro, "micro", true, "also run BenchmarkDecide (10,000 rules) and BenchmarkFakeIPAnswer")
	fs.BoolVar(&o.names, "names", false, "measure what reading names costs: row router runs an allow-list by name (hosts = [\""+sinkName+"\"]), row router-base the same build (or -base) with the catch-all; both rows' connections go to the fake IP of "+sinkName+" with an HTTP/1.1 request naming it (default rows router-base,router, phases rate,seq)")
	fs.BoolVar(&o.verbose, "v", false, "log the setup steps")
	only := fs.String("rows", "", "measure only these rows, comma separated (default all: direct,upstream,redsocks,singbox,router-base,router); ratios need their base row")
	phases := fs.String("phases", "get,rate,seq,idle,agent", "which measurements, comma separated (agent: the agent's workload, rows upstream, redsocks, singbox and the routers)")
	fs.DurationVar(&o.idleWait, "idle-wait", 2*time.Second, "how long the idle flows are held before the proxy's memory is read")
	fs.StringVar(&o.jsonOut, "json", "", "write every per-round figure to this `file`")
	fromJSON := fs.String("from-json", "", "measure nothing: print the report of a run saved with -json to this `file`")
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
		o.fetches, o.streams = 300, 10
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
	if o.rounds < 1 || o.size < 1 || o.conns < 1 || o.par < 1 || o.seq < 1 || o.fetches < 1 || o.streams < 1 {
		fmt.Fprintln(stderr, "routerbench: rounds, size, conns, par, seq, fetches and streams must be positive")
		return 2
	}
	if o.names {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["rows"] {
			o.rows = []string{rowRouterBase, rowRouter}
		}
		if !set["phases"] {
			o.phases = []string{"rate", "seq"}
		}
		if !set["micro"] {
			o.micro = false
		}
	}
	if *fromJSON != "" {
		if err := reprint(*fromJSON, stdout); err != nil {
			fmt.Fprintf(stderr, "routerbench: %v\n", err)
			return 1
		}
		return 0
	}
	if o.baseBin != "" && o.baseRev != "" {
		fmt.Fprintln(stderr, "routerbench: -base and -base-rev: give one")
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
	rs, err := selectRows(o)
	if err != nil {
		return err
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
	m, bins, err := prepareBinaries(ctx, o, rs, dir, stderr)
	if err != nil {
		return err
	}
	logf := func(string, ...any) {}
	if o.verbose {
		logf = func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	}
	start := time.Now()
	w, err := newWorld(ctx, exe, dir, rs, bins, o.routerLog, o.routerEnv, o.names, logf)
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
	if err := w.warmUp(ctx, o, rs); err != nil {
		return err
	}
	for round := range o.rounds {
		if err := w.round(ctx, o, rs, res, round, stderr); err != nil {
			return fmt.Errorf("round %d: %w", round+1, err)
		}
	}
	m.Duration = time.Since(start).Round(time.Second).String()
	names := rowNames(rs)
	if o.jsonOut != "" {
		b, err := json.MarshalIndent(dump(m, names, res), "", " ")
		if err != nil {
			return fmt.Errorf("json: %w", err)
		}
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	header(stdout, m)
	report(stdout, o, names, res)
	if o.micro {
		micro(ctx, stdout, stderr)
	}
	return nil
}

// prepareBinaries builds (or takes) the binaries the rows need: the router, the second
// router build, sing-box; it returns them by row and describes each build.
func prepareBinaries(ctx context.Context, o options, rs []row, dir string, log io.Writer) (meta, map[string]string, error) {
	m := meta{Rounds: o.rounds, Size: o.size, Conns: o.conns, Par: o.par, Seq: o.seq, Fetches: o.fetches, Streams: o.streams, Idle: o.idle, Rows: rowNames(rs)}
	bins := map[string]string{}
	var root string
	needRoot := func() error {
		if root != "" {
			return nil
		}
		var err error
		root, err = moduleRoot(ctx)
		return err
	}
	has := func(name string) bool { return slices.ContainsFunc(rs, func(r row) bool { return r.name == name }) }
	if has(rowRouter) || o.names && has(rowRouterBase) {
		if o.routerBin != "" {
			bins[rowRouter] = o.routerBin
			m.Builds = append(m.Builds, build{Row: rowRouter, What: "binary " + o.routerBin})
		} else {
			if err := needRoot(); err != nil {
				return m, nil, fmt.Errorf("build router: %w", err)
			}
			fmt.Fprintln(log, "building ./cmd/router ...")
			bins[rowRouter] = filepath.Join(dir, "router")
			if err := buildRouter(ctx, root, bins[rowRouter]); err != nil {
				return m, nil, err
			}
			what := "./cmd/router of " + root
			if d := describeTree(ctx, root); d != "" {
				what += " at " + d
			}
			m.Builds = append(m.Builds, build{Row: rowRouter, What: what})
		}
	}
	if has(rowRouterBase) {
		switch {
		case o.baseBin != "":
			bins[rowRouterBase] = o.baseBin
			m.Builds = append(m.Builds, build{Row: rowRouterBase, What: "binary " + o.baseBin})
		case o.baseRev == "" && o.names:
			// -names alone: the same build, with the catch-all config.
			bins[rowRouterBase] = bins[rowRouter]
			m.Builds = append(m.Builds, build{Row: rowRouterBase, What: "the router row's build, with the catch-all rule (-names)"})
		default:
			if err := needRoot(); err != nil {
				return m, nil, fmt.Errorf("-base-rev: %w", err)
			}
			bin, commit, err := buildRevision(ctx, root, o.baseRev, dir, log)
			if err != nil {
				return m, nil, err
			}
			bins[rowRouterBase] = bin
			m.Builds = append(m.Builds, build{Row: rowRouterBase, What: fmt.Sprintf("./cmd/router at %s (%s)", o.baseRev, commit)})
		}
	}
	if has(rowSingbox) {
		bin, err := singboxBinary(ctx, o.singboxV, log)
		if err != nil {
			return m, nil, err
		}
		if err := singboxCheck(ctx, bin, dir); err != nil {
			return m, nil, fmt.Errorf("%w (leave the row out with -singbox=false)", err)
		}
		bins[rowSingbox] = bin
		m.Builds = append(m.Builds, build{Row: rowSingbox, What: fmt.Sprintf("sing-box %s (%s, default build tags), %s", o.singboxV, singboxModule, bin)})
	}
	if has(rowRedsocks) {
		m.Builds = append(m.Builds, build{Row: rowRedsocks, What: redsocksVersion(ctx)})
	}
	return m, bins, nil
}

// redsocksVersion is the first line of `redsocks -v`.
func redsocksVersion(ctx context.Context) string {
	out, _ := exec.CommandContext(ctx, "redsocks", "-v").CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if line == "" {
		return "redsocks"
	}
	return line
}

// header says what was run: the rounds, the download size and each row's build.
func header(out io.Writer, m meta) {
	fmt.Fprintf(out, "routerbench: %d round(s) in %s, %s per download, rows paired within each round (order reversed every other round).\n",
		m.Rounds, m.Duration, sizeString(m.Size))
	for _, b := range m.Builds {
		fmt.Fprintf(out, "  %-11s %s\n", b.Row, b.What)
	}
}

// reprint prints the report of a run saved with -json.
func reprint(file string, out io.Writer) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var d jsonDump
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	o, res, err := d.results()
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	header(out, d.Meta)
	report(out, o, d.Meta.Rows, res)
	return nil
}
