package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentcage/router/router/control"
)

// cmdAsk lists the prompts of the flows the running daemon holds under ask, or answers one.
func cmdAsk(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("ask",
		"Lists the destinations the running daemon asks about (the flows it holds under ask), or\nanswers one: once (the flows held now), run (until the daemon stops), always (written as a\nrule to the router's own rules file, approved.toml) or deny.", stderr)
	cfgPath, socket := controlFlags(fs)
	asJSON := jsonFlag(fs)
	id := fs.Uint64("id", 0, "the prompt to answer (as the list shows it)")
	answer := fs.String("answer", "", "the answer: once, run, always or deny")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	req := control.Request{Op: "asks"}
	switch {
	case *id == 0 && *answer == "":
	case *id == 0 || *answer == "":
		fmt.Fprintln(stderr, "router ask: --id and --answer go together")
		return exitUsage
	default:
		req = control.Request{Op: "answer", ID: *id, Answer: *answer, By: "router ask"}
	}
	resp, code, ok := callDaemon("ask", *cfgPath, *socket, req, stderr)
	if !ok {
		return code
	}
	if *asJSON {
		return writeJSON(stdout, stderr, resp.Asks)
	}
	if req.Op == "answer" {
		p := resp.Asks[0]
		fmt.Fprintf(stdout, "answered %s to %s:%d (%d flows held)\n", req.Answer, p.Host, p.Port, p.Held)
		return exitOK
	}
	writeAsks(stdout, resp.Asks, time.Now())
	return exitOK
}

// writeAsks prints the pending prompts as `router ask` and `router watch` show them.
func writeAsks(w io.Writer, ps []control.Prompt, now time.Time) {
	if len(ps) == 0 {
		fmt.Fprintln(w, "nothing is asked")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tDESTINATION\tHELD\tSOURCES\tRULE\tLEFT")
	for _, p := range ps {
		fmt.Fprintf(tw, "%d\t%s:%d\t%d\t%s\t%s\t%s\n", p.ID, p.Host, p.Port, p.Held, strings.Join(p.Sources, ","), p.Rule, p.Until.Sub(now).Round(time.Second))
	}
	tw.Flush()
	fmt.Fprintln(w, "answer with: router ask --id ID --answer once|run|always|deny")
}

// cmdConsole prints the running daemon's web console URL (with its token).
func cmdConsole(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("console",
		"Prints the URL of the running daemon's web console ([console] listen), with the token\nthat lets a browser in once (it is then kept in a cookie). Open it on this host.", stderr)
	cfgPath, socket := controlFlags(fs)
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	resp, code, ok := callDaemon("console", *cfgPath, *socket, control.Request{Op: "console"}, stderr)
	if !ok {
		return code
	}
	fmt.Fprintln(stdout, resp.URL)
	return exitOK
}
