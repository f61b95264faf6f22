package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/agentcage/router/cmd/router/replay"
	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/rules/policy"
)

const diffHelp = "Replays a recorded session (the flow log, [log] flows, with its rotated files) under the\n" +
	"old config and a new one with explain's policy, and prints which recorded flows the new\n" +
	"config would refuse, newly let through, or send another way, grouped by the rule that\n" +
	"would decide them. --old defaults to the config the running daemon loaded. Exit 1 when the\n" +
	"new config opens anything: a flow the old one refused would be carried, or a caged flow it\n" +
	"proxied would go direct (from this host's address); exit 0 when it only narrows or moves."

func cmdDiff(args []string, stdout, stderr io.Writer) int {
	h := &hostAddrSet{}
	return diff(args, stdout, stderr, policy.Env{HostAddr: h.has, Scoped: true})
}

// diff is `router diff`; env tells both policies this machine's addresses.
func diff(args []string, stdout, stderr io.Writer, env policy.Env) int {
	fs := newFlags("diff", diffHelp, stderr)
	flows := fs.String("flows", "", "the flow log `file` to replay (default: the old config's [log] flows)")
	oldPath := fs.String("old", "", "the config `file` in force (default: the running daemon's)")
	newPath := fs.String("new", "", "the proposed config `file`")
	socket := fs.String("socket", "", "the running router's control `path`, to find its config")
	goos := fs.String("os", "", "judge for this operating system (`linux` or windows); default this one")
	asJSON := jsonFlag(fs)
	if code, stop := parseFlags(fs, args, "new"); stop {
		return code
	}
	if *oldPath == "" {
		resp, code, ok := callDaemon("diff", "", *socket, control.Request{Op: "status"}, stderr)
		if !ok {
			fmt.Fprintln(stderr, "router diff: name the config in force with --old when no router runs")
			return code
		}
		*oldPath = resp.Status.Config
	}
	opts := conf.Options{SkipSecrets: true, OS: *goos}
	oldCfg, err := conf.Load(*oldPath, opts)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	newCfg, err := conf.Load(*newPath, opts)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if *flows == "" {
		*flows = oldCfg.Log.Flows
	}
	if *flows == "" {
		fmt.Fprintf(stderr, "router diff: %s sets no [log] flows: name the recorded session with --flows\n", *oldPath)
		return exitUsage
	}
	d := replay.New(policy.New(oldCfg, env), policy.New(newCfg, env))
	if err := readFlowLogs(*flows, d.Add); err != nil {
		fmt.Fprintf(stderr, "router diff: %v\n", err)
		return exitUsage
	}
	r := d.Report()
	code := exitOK
	if r.Opens() {
		code = exitFindings
	}
	if *asJSON {
		if c := writeJSON(stdout, stderr, r); c != exitOK {
			return c
		}
		return code
	}
	writeDiff(stdout, r, *oldPath, *newPath)
	return code
}

// writeDiff prints a replay's report.
func writeDiff(w io.Writer, r replay.Report, oldPath, newPath string) {
	fmt.Fprintf(w, "replayed %d flows under %s (old) and %s (new)\n", r.Flows, oldPath, newPath)
	titles := map[replay.Change]string{
		replay.Opened:  "OPENED (the new config lets through what the old refused, or sends a caged flow direct)",
		replay.Refused: "refused by the new config",
		replay.Moved:   "sent another way",
	}
	last := replay.Same
	for _, g := range r.Groups {
		if g.Change != last {
			fmt.Fprintf(w, "\n%s:\n", titles[g.Change])
			last = g.Change
		}
		fmt.Fprintf(w, "  %d flows: %s (was %s)\n", g.Flows, g.New, g.Old)
		var ds []string
		for i, d := range g.Dests {
			if i == 8 {
				ds = append(ds, fmt.Sprintf("and %d more", len(g.Dests)-i))
				break
			}
			ds = append(ds, fmt.Sprintf("%s (%d)", d.Name, d.Flows))
		}
		fmt.Fprintf(w, "    %s\n", strings.Join(ds, ", "))
	}
	fmt.Fprintf(w, "\nunchanged: %d flows", r.Same)
	if r.Skipped > 0 {
		fmt.Fprintf(w, "; %d records that are not flows skipped", r.Skipped)
	}
	fmt.Fprintln(w)
	if r.Opens() {
		fmt.Fprintln(w, "the new config OPENS the cage for the flows above (exit 1)")
	}
}
