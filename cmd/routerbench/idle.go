//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/agentcage/router/internal/bench"
	"github.com/agentcage/router/internal/lab"
)

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
			return before, during, fmt.Errorf("idle %s: %w: %s\n%s output:\n%s", r.name, err, stderr.String(), r.name, tail(p.Output(), 2000))
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
