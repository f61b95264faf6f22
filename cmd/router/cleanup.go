package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/control"
)

// stopWait bounds how long `cleanup --force` waits for the daemon to exit after SIGTERM (its
// grace for running flows is 2 s).
const stopWait = 15 * time.Second

func cmdCleanup(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cleanup",
		"Removes the router's capture and fail-closed guard (Linux: the nftables table it owns;\nWindows: the WFP filters of its provider), so VM traffic flows again WITHOUT the proxy.\nRun it only when you mean to take the cage down. While a router runs it restores its\nguard, so cleanup refuses; --force stops that router first (SIGTERM to the process id\nit reports over the control channel).", stderr)
	cfgPath := fs.String("config", "", "read the table name and the control socket from this config `file`")
	table := fs.String("table", conf.DefaultTable, "the table `name`")
	socket := socketFlag(fs)
	force := fs.Bool("force", false, "stop a running router first")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	path := cmp.Or(*socket, control.DefaultPath)
	if *cfgPath != "" {
		cfg, err := conf.Load(*cfgPath, stateOptions(conf.Options{SkipSecrets: true}))
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
		*table = cfg.Capture.Table
		path = cmp.Or(*socket, cfg.Control.Socket, control.DefaultPath)
	}
	if st, ok := runningDaemon(path); ok {
		if !*force {
			fmt.Fprintf(stderr, "router cleanup: a router is running (pid %d, config %s) and would restore its guard at once: stop it first, or run `router cleanup --force` to stop it and remove the guard\n", st.PID, st.Config)
			return exitFindings
		}
		if err := stopDaemon(st.PID, stopWait); err != nil {
			fmt.Fprintf(stderr, "router cleanup: stop the running router (pid %d): %v\n", st.PID, err)
			return exitFindings
		}
		fmt.Fprintf(stdout, "stopped the running router (pid %d)\n", st.PID)
	}
	what, err := cleanup(*table)
	if err != nil {
		fmt.Fprintf(stderr, "router cleanup: %v\n", err)
		return exitFindings
	}
	fmt.Fprintf(stdout, "%s: VM traffic is no longer guarded\n", what)
	return exitOK
}

// runningDaemon asks the control channel at path whether a router runs; ok is false when
// nothing answers there (no daemon, or one without a control channel).
func runningDaemon(path string) (*control.Status, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, path)
	if err != nil {
		return nil, false
	}
	defer c.Close()
	resp, err := c.Do(control.Request{Op: "status"})
	if err != nil || resp.Status == nil {
		return nil, false
	}
	return resp.Status, true
}
