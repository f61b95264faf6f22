//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/agentcage/router/internal/bench"
	"github.com/agentcage/router/internal/lab"
)

// usage is CPU time spent so far: by the row's proxy, by the upstream, by the machine (busy
// time of /proc/stat over all CPUs: user, nice, system, irq, softirq, steal; so the kernel's
// work that no process is billed for counts, and so does other work sharing the machine),
// the machine's irq+softirq part of it, and by the lab (every process of the benchmark and
// the kernel threads; unlike the machine figure it leaves out other work sharing the
// machine, except the interrupts that happen to hit that work).
type usage struct{ proxy, up, machine, irq, lab time.Duration }

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
	mc, err := pfs.Machine()
	if err != nil {
		return u, err
	}
	u.machine, u.irq = mc.Busy(), mc.IRQ+mc.SoftIRQ
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
	return usage{proxy: u.proxy - v.proxy, up: u.up - v.up, machine: u.machine - v.machine, irq: u.irq - v.irq, lab: u.lab - v.lab}
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
func (w *world) warmUp(ctx context.Context, o options, rs []row) error {
	for _, r := range rs {
		var g bench.GetResult
		if w.names {
			// The download is by address: an allow-list by name refuses it.
		} else if _, err := w.load(ctx, r, &g, "get", "-size", strconv.Itoa(64<<20), sinkBulk); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		var rr bench.RateResult
		target, flags := w.conns(r)
		if _, err := w.load(ctx, r, &rr, "rate", append(flags, "-n", "200", "-par", "8", "-size", "1024", target)...); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if rr.Errors > 0 {
			return fmt.Errorf("warm-up %s: %d of 200 connections failed: %s", r.name, rr.Errors, rr.FirstError)
		}
		if o.phase("agent") && agentRow(r) {
			if _, _, err := w.fetch(ctx, r, 20); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
			if _, err := w.stream(ctx, r, 1); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	return nil
}

// agentRow reports whether row r runs the agent's workload: every row but direct (the
// hypervisor's NAT alone sends nothing through a proxy; the upstream row is the ceiling).
func agentRow(r row) bool { return r.name != rowDirect }

// fetch runs the agent's HTTPS burst of n fetches for row r; a failed fetch is an error.
func (w *world) fetch(ctx context.Context, r row, n int) (bench.FetchResult, usage, error) {
	var fr bench.FetchResult
	u, err := w.load(ctx, r, &fr, "fetch", "-n", strconv.Itoa(n), "-par", strconv.Itoa(fetchPar), "-host", sinkName, "-ca", w.caFile, w.fetches(r))
	if err == nil && fr.Errors > 0 {
		err = fmt.Errorf("fetch %s: %d of %d fetches failed: %s", r.name, fr.Errors, n, fr.FirstError)
	}
	return fr, u, err
}

// stream runs n streamed model replies for row r: through its forward (a router row) or
// straight to the server, never through the row's SOCKS server.
func (w *world) stream(ctx context.Context, r row, n int) (bench.StreamResult, error) {
	var sr bench.StreamResult
	addr, _ := modelAt(r.name)
	direct := r
	direct.socks = ""
	_, err := w.load(ctx, direct, &sr, "stream", "-n", strconv.Itoa(n), addr)
	return sr, err
}

// round measures every row once, phase by phase (download, connection rate, sequential
// connections, idle flows, the agent's workload), and records the figures under round in res.
func (w *world) round(ctx context.Context, o options, rs []row, res *results, round int, log io.Writer) error {
	gib := float64(o.size) / (1 << 30)
	order := roundOrder(rs, round)
	for _, r := range order {
		if !o.phase("get") {
			break
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
		res.set(r.name, "mach_irq_gib", round, u.irq.Seconds()/gib)
		res.set(r.name, "lab_gib", round, u.lab.Seconds()/gib)
		line := fmt.Sprintf("round %d  %-11s get   %6.0f MiB/s  machine %.2f s/GiB (irq+softirq %.2f)  lab %.2f  upstream %.2f",
			round+1, r.name, mibs, u.machine.Seconds()/gib, u.irq.Seconds()/gib, u.lab.Seconds()/gib, u.up.Seconds()/gib)
		if r.proxy != nil {
			res.set(r.name, "cpu_gib", round, u.proxy.Seconds()/gib)
			line += fmt.Sprintf("  proxy %.2f s/GiB", u.proxy.Seconds()/gib)
			var pfs bench.ProcFS
			n, err := pfs.SockMaps(r.proxy(w).PID())
			if err != nil {
				return err
			}
			res.set(r.name, "sockmaps", round, float64(n))
			if n > 0 {
				line += fmt.Sprintf("  %d sockmap(s)", n)
			}
		}
		fmt.Fprintln(log, line)
	}
	for _, kind := range []struct {
		name   string
		n, par int
	}{
		{"rate", o.conns, o.par},
		{"seq", o.seq, 1},
	} {
		if !o.phase(kind.name) {
			continue
		}
		for _, r := range order {
			var rr bench.RateResult
			target, flags := w.conns(r)
			u, err := w.load(ctx, r, &rr, "rate", append(flags, "-n", strconv.Itoa(kind.n), "-par", strconv.Itoa(kind.par), "-size", "1024", target)...)
			if err != nil {
				return err
			}
			if rr.Errors > 0 {
				return fmt.Errorf("%s %s: %d of %d connections failed: %s", kind.name, r.name, rr.Errors, kind.n, rr.FirstError)
			}
			n := float64(rr.Count)
			perConn := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / n }
			cps := n / rr.Seconds
			res.set(r.name, kind.name+"_cps", round, cps)
			res.set(r.name, kind.name+"_p50", round, rr.P50)
			res.set(r.name, kind.name+"_p99", round, rr.P99)
			res.set(r.name, kind.name+"_up_us", round, perConn(u.up))
			res.set(r.name, kind.name+"_mach_us", round, perConn(u.machine))
			res.set(r.name, kind.name+"_lab_us", round, perConn(u.lab))
			line := fmt.Sprintf("round %d  %-11s %-5s %6.0f conn/s  p50 %5.0f µs  p99 %6.0f µs  machine %4.0f µs/conn  lab %4.0f",
				round+1, r.name, kind.name, cps, rr.P50, rr.P99, perConn(u.machine), perConn(u.lab))
			if r.proxy != nil {
				res.set(r.name, kind.name+"_cpu_us", round, perConn(u.proxy))
				line += fmt.Sprintf("  proxy %4.0f µs/conn", perConn(u.proxy))
			}
			fmt.Fprintln(log, line)
		}
	}
	if o.phase("agent") {
		if err := w.agent(ctx, o, order, res, round, log); err != nil {
			return err
		}
	}
	for _, r := range order {
		if r.proxy == nil || !o.phase("idle") {
			continue
		}
		for _, n := range o.idle {
			if r.maxIdle > 0 && n > r.maxIdle {
				continue
			}
			before, during, err := w.idleMem(ctx, r, n)
			if err != nil {
				return err
			}
			key := "idle" + strconv.Itoa(n)
			held := (during.Sockets - before.Sockets) / 2
			if held != n {
				fmt.Fprintf(log, "round %d  %-11s idle: %d flows held, not %d\n", round+1, r.name, held, n)
			}
			per := float64(during.RSSKiB-before.RSSKiB) / float64(max(held, 1))
			res.set(r.name, key+"_kib", round, per)
			res.set(r.name, key+"_rss0", round, float64(before.RSSKiB))
			res.set(r.name, key+"_rss", round, float64(during.RSSKiB))
			res.set(r.name, key+"_fds", round, float64(during.FDs))
			res.set(r.name, key+"_pipes", round, float64(during.Pipes))
			res.set(r.name, key+"_threads", round, float64(during.Threads))
			fmt.Fprintf(log, "round %d  %-11s idle  %d flows: RSS %d -> %d KiB (%.1f KiB/flow), %d fds (%d pipes), %d threads\n",
				round+1, r.name, n, before.RSSKiB, during.RSSKiB, per, during.FDs, during.Pipes, during.Threads)
		}
	}
	return nil
}

// agent measures the agent's workload for the rows of order that run it, in that order: the
// HTTPS burst of every row, then the streamed model replies of every row.
func (w *world) agent(ctx context.Context, o options, order []row, res *results, round int, log io.Writer) error {
	for _, r := range order {
		if !agentRow(r) {
			continue
		}
		fr, u, err := w.fetch(ctx, r, o.fetches)
		if err != nil {
			return err
		}
		res.set(r.name, "agent_wall", round, fr.Seconds)
		res.set(r.name, "agent_p50", round, fr.P50)
		res.set(r.name, "agent_p99", round, fr.P99)
		res.set(r.name, "agent_mach_s", round, u.machine.Seconds())
		line := fmt.Sprintf("round %d  %-11s fetch %d × HTTPS in %.2f s (%.0f MiB)  p50 %.1f ms  p99 %.1f ms  machine %.2f s",
			round+1, r.name, fr.Count, fr.Seconds, float64(fr.Bytes)/(1<<20), fr.P50, fr.P99, u.machine.Seconds())
		if r.proxy != nil {
			res.set(r.name, "agent_cpu_s", round, u.proxy.Seconds())
			line += fmt.Sprintf("  proxy %.2f s", u.proxy.Seconds())
		}
		fmt.Fprintln(log, line)
	}
	for _, r := range order {
		if !agentRow(r) {
			continue
		}
		sr, err := w.stream(ctx, r, o.streams)
		if err != nil {
			return err
		}
		res.set(r.name, "model_ttfb_p50", round, sr.TTFBP50)
		res.set(r.name, "model_ttfb_p99", round, sr.TTFBP99)
		res.set(r.name, "model_gap_p50", round, sr.GapP50)
		res.set(r.name, "model_gap_p99", round, sr.GapP99)
		res.set(r.name, "model_lat_p50", round, sr.LatP50)
		res.set(r.name, "model_lat_p99", round, sr.LatP99)
		addr, forward := modelAt(r.name)
		via := "straight to the server"
		if forward {
			via = "through the forward"
		}
		fmt.Fprintf(log, "round %d  %-11s model %d × %d events %s (%s): TTFB p50 %.0f µs p99 %.0f  gap p50 %.0f p99 %.0f  latency p50 %.0f p99 %.0f\n",
			round+1, r.name, sr.Streams, sr.Events, via, addr, sr.TTFBP50, sr.TTFBP99, sr.GapP50, sr.GapP99, sr.LatP50, sr.LatP99)
	}
	return nil
}
