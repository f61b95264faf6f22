package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/agentcage/router/router/control"
)

// reloadTimeout bounds `router reload`: the daemon reads, checks and installs the new
// config before it answers.
const reloadTimeout = 30 * time.Second

// reloadHelp is `router reload --help`'s detail.
const reloadHelp = "Asks the running daemon to read its config file again and apply it, all or nothing, and\nwaits for the outcome: exit 0 when the new config runs, 1 with the reason when the daemon\nrefused it (the running config stays; router status shows the refusal). systemctl reload\nruns this. With --config whose file does not load (the very case a reload refuses), the\ndefault control socket is asked."

func cmdReload(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("reload", reloadHelp, stderr)
	cfgPath, socket := controlFlags(fs)
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	path, err := controlPath(*cfgPath, *socket)
	if err != nil {
		path = cmp.Or(*socket, control.DefaultPath)
	}
	ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
	defer cancel()
	c, err := dialControl(ctx, path)
	if err != nil {
		fmt.Fprintf(stderr, "router reload: %v\n", err)
		return exitFindings
	}
	defer c.Close()
	resp, err := c.DoTimeout(control.Request{Op: "reload"}, reloadTimeout)
	if err != nil {
		fmt.Fprintf(stderr, "router reload: refused; the running config stays%s:\n%v\n", runningText(resp.Config), err)
		return exitFindings
	}
	fmt.Fprintf(stdout, "reloaded%s\n", runningText(resp.Config))
	return exitOK
}

// runningText is " (sha256 0123456789ab, loaded TIME)" for a running config; "" when unknown.
func runningText(cs *control.ConfigStat) string {
	if cs == nil || cs.SHA256 == "" {
		return ""
	}
	return fmt.Sprintf(" (sha256 %.12s, loaded %s)", cs.SHA256, cs.Loaded.Format(time.RFC3339))
}

// writeRunning prints the running config's line of `router status`, and the last refused
// reload with its error when there was one.
func writeRunning(w io.Writer, cs control.ConfigStat, now time.Time) {
	if cs.SHA256 == "" {
		return
	}
	fmt.Fprintf(w, "config: sha256 %.12s, loaded %s (%s ago); reloads: %d applied, %d refused\n",
		cs.SHA256, cs.Loaded.Format(time.RFC3339), ago(cs.Loaded, now), cs.Reloads, cs.Refused)
	if r := cs.LastRefused; r != nil {
		fmt.Fprintf(w, "last reload REFUSED at %s (%s ago), the config above stays: %s\n", r.At.Format(time.RFC3339), ago(r.At, now), r.Error)
	}
}
