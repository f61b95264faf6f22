package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/control"
)

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status",
		"Shows the running daemon's totals, upstream health, how many flows and bytes each rule\ndecided, what was refused and why, and the live flows with their bytes and rates, over the\nlocal control channel (only root / Administrators can open it).", stderr)
	cfgPath, socket := controlFlags(fs)
	asJSON := jsonFlag(fs)
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	resp, code, ok := callDaemon("status", *cfgPath, *socket, control.Request{Op: "status"}, stderr)
	if !ok {
		return code
	}
	st := resp.Status
	if *asJSON {
		return writeJSON(stdout, stderr, st)
	}
	writeStatus(stdout, st, time.Now())
	return exitOK
}

// callDaemon sends req to the running daemon over the control channel (the socket that
// socket names, else the config's [control] socket, else the default) and returns its
// answer; on a failure it has said why on stderr for the command name and returns the exit
// code (exitUsage for a bad config, exitFindings when the daemon cannot be asked).
func callDaemon(name, cfgPath, socket string, req control.Request, stderr io.Writer) (control.Response, int, bool) {
	path, err := controlPath(cfgPath, socket)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return control.Response{}, exitUsage, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dialControl(ctx, path)
	if err != nil {
		fmt.Fprintf(stderr, "router %s: %v\n", name, err)
		return control.Response{}, exitFindings, false
	}
	defer c.Close()
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "router %s: %v\n", name, err)
		return control.Response{}, exitFindings, false
	}
	return resp, exitOK, true
}

// writeStatus prints st as `router status` shows it; now is the time ages are taken from.
func writeStatus(w io.Writer, st *control.Status, now time.Time) {
	t := st.Totals
	fmt.Fprintf(w, "router running since %s (%s), pid %d, config %s\n", st.Started.Format(time.RFC3339), now.Sub(st.Started).Round(time.Second), st.PID, st.Config)
	writeRunning(w, st.Running, now)
	switch g := st.Guard; {
	case g.Restores > 0:
		fmt.Fprintf(w, "guard: restored %d times; last at %s: %s\n", g.Restores, g.LastRestore.Format(time.RFC3339), g.LastDamage)
	case g.Watched:
		fmt.Fprintln(w, "guard: watched, never restored")
	}
	if g := st.Guard; len(g.GuardedApps) > 0 {
		fmt.Fprintf(w, "guard: blocks %s when no router runs\n", strings.Join(g.GuardedApps, ", "))
	}
	for _, u := range st.Guard.Unguarded {
		fmt.Fprintf(w, "guard: NOT guarded (caged only while the router runs): %s\n", u)
	}
	for _, r := range st.Guard.Rivals {
		fmt.Fprintf(w, "guard: rival: %s\n", r)
	}
	fmt.Fprintf(w, "flows: %d (%d live), up %s, down %s; refused: %d\n", t.Flows, t.Live, humanBytes(t.Up), humanBytes(t.Down), t.Refused)
	if b := st.Budgets; b.FlowBudget > 0 {
		fmt.Fprintf(w, "budgets: flows %d of %d; set-up: %d in progress, %d waiting; forwards: %d of %d; inbounds: %d of %d\n",
			b.Flows, b.FlowBudget, b.Setups, b.SetupWaiting, b.Forwards, b.ForwardBudget, b.Inbounds, b.InboundBudget)
	}
	fmt.Fprintf(w, "dns: %s", st.DNS.Mode)
	if st.DNS.Pool != "" {
		fmt.Fprintf(w, ", pool %s: %d of %d addresses given out, %d in use", st.DNS.Pool, st.DNS.Mapped, st.DNS.PoolSize, st.DNS.InUse)
	}
	fmt.Fprintln(w)
	for _, warn := range st.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(st.Upstreams) > 0 {
		fmt.Fprintln(tw, "\nUPSTREAM\tSTATE\tSINCE\tLATENCY\tLAST ERROR")
		for _, u := range st.Upstreams {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.Name, u.State, ago(u.Since, now), latency(u.Latency), u.LastError)
		}
	}
	fmt.Fprintln(tw, "\nRULE\tACTION\tFLOWS\tBYTES")
	for _, r := range st.Rules {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", statusRule(r.Index, r.Name), ruleAction(r), r.Hits, humanBytes(r.Bytes))
	}
	tw.Flush()
	writeProfiles(w, st)
	if len(st.Caged) > 0 {
		fmt.Fprintln(tw, "\nCAGED PROCESS\tPID\tFLOWS\tREFUSED\tLAST")
		for _, c := range st.Caged {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s ago\n", c.Name, c.PID, c.Flows, c.Refused, ago(c.Last, now))
		}
	}
	if len(st.KernelCaged) > 0 {
		fmt.Fprintln(tw, "\nCAGED BY THE KERNEL\tPID\tNAMED\tCAGED AS")
		for _, c := range st.KernelCaged {
			as := "itself"
			if c.By != "" {
				as = fmt.Sprintf("child of %s (pid %d)", c.By, c.ByPID)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", c.Exe, c.PID, c.Comm, as)
		}
	}
	if len(st.Refusals) > 0 {
		fmt.Fprintln(tw, "\nREFUSED\tCOUNT\tLATEST")
		for _, r := range st.Refusals {
			latest := ""
			if len(r.Recent) > 0 {
				latest = refusedText(r.Recent[0]) + ", " + ago(r.Recent[0].At, now) + " ago"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\n", r.Reason, r.Count, latest)
		}
	}
	if len(st.DomainBudgets) > 0 {
		fmt.Fprintln(tw, "\nBUDGET\tGUEST\tDOMAIN\tUSED\tWINDOW ENDS")
		for _, u := range st.DomainBudgets {
			fmt.Fprintln(tw, strings.Join(budgetRow(u, now), "\t"))
		}
	}
	fmt.Fprintf(tw, "\nLIVE FLOWS (%d)\tSOURCE\tDESTINATION\tRULE\tACTION\tAGE\tUP\tDOWN\tRATE UP\tRATE DOWN\n", len(st.Flows))
	for _, f := range st.Flows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.ID, flowSource(f), flowDest(f), f.Rule, actionText(f.Action, cmp.Or(f.Via, f.Proxy)),
			f.Age.Round(time.Second), humanBytes(f.Up), humanBytes(f.Down), humanRate(f.UpRate), humanRate(f.DownRate))
	}
	tw.Flush()
}

// budgetRow is one [budget] count as status and watch show it: the budget ("bytes up",
// "names"), guest, domain, "3.2 MiB of 50.0 MiB" or "12 of 200" (with "OVER" past it), and
// the time left in the window.
func budgetRow(u control.DomainBudgetStat, now time.Time) []string {
	kind, used := "names", fmt.Sprintf("%d of %d", u.Used, u.Limit)
	if u.Budget == control.BudgetBytesUp {
		kind, used = "bytes up", humanBytes(uint64(u.Used))+" of "+humanBytes(uint64(u.Limit))
	}
	if u.Over {
		used += " OVER"
	}
	return []string{kind, u.Guest, u.Domain, used, "in " + max(u.Ends.Sub(now), 0).Round(time.Second).String()}
}

// ruleAction is a rule's action as status and watch show it: "disabled (proxy via exit)"
// for a rule with enabled = false.
func ruleAction(r control.RuleStat) string {
	if r.Disabled {
		return "disabled (" + actionText(r.Action, r.Proxy) + ")"
	}
	return actionText(r.Action, r.Proxy)
}

// statusRule is "#3 name" for a rule, the step's name for an implicit step.
func statusRule(index int, name string) string {
	if index > 0 {
		return fmt.Sprintf("#%d %s", index, name)
	}
	return name
}

func actionText(action, proxy string) string {
	if proxy != "" {
		return action + " via " + proxy
	}
	return action
}

func flowSource(f control.FlowStat) string {
	if f.App != "" {
		return f.Src + " " + f.App
	}
	return f.Src
}

func flowDest(f control.FlowStat) string {
	if f.Host != "" && f.NameFrom != "" {
		return f.Dst + " (" + f.Host + " by " + f.NameFrom + ")"
	}
	if f.Host != "" {
		return f.Dst + " (" + f.Host + ")"
	}
	return f.Dst
}

// refusedText is "src → dst request (host) app, by rule".
func refusedText(e control.Refused) string {
	var b strings.Builder
	if e.Src != "" {
		b.WriteString(e.Src + " → ")
	}
	b.WriteString(cmp.Or(e.Dst, "?"))
	if e.Request != "" {
		b.WriteString(" " + e.Request)
	}
	if e.Host != "" {
		b.WriteString(" (" + e.Host + ")")
	}
	if e.App != "" {
		b.WriteString(" " + e.App)
	}
	if e.Rule != "" {
		b.WriteString(", by " + e.Rule)
	}
	return b.String()
}

// ago is how long before now t was, rounded for reading; "-" for the zero time.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Hour).String()
}

func latency(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// humanBytes is n in B, KiB, MiB, GiB or TiB with one decimal.
func humanBytes(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, 0
	for v >= 1024 && unit < 3 {
		v /= 1024
		unit++
	}
	return fmt.Sprintf("%.1f %s", v, [...]string{"KiB", "MiB", "GiB", "TiB"}[unit])
}

// humanRate is a rate in bytes per second; "-" when nothing moved.
func humanRate(n uint64) string {
	if n == 0 {
		return "-"
	}
	return humanBytes(n) + "/s"
}

// socketFlag defines --socket: the control socket's path (control.DefaultPath when empty).
func socketFlag(fs *flag.FlagSet) *string {
	return fs.String("socket", "", "the control socket `path` (default "+control.DefaultPath+")")
}

// jsonFlag defines --json: the command prints its answer as JSON, for scripts.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print JSON for scripts")
}

// controlFlags defines --config and --socket for a command that talks to the running
// daemon; controlPath turns them into the socket's path.
func controlFlags(fs *flag.FlagSet) (cfgPath, socket *string) {
	return fs.String("config", "", "read [control] socket from this config `file`"), socketFlag(fs)
}

// controlPath picks the control socket: --socket, else the config's [control] socket, else
// the default.
func controlPath(cfgPath, socket string) (string, error) {
	if socket != "" || cfgPath == "" {
		return cmp.Or(socket, control.DefaultPath), nil
	}
	cfg, err := conf.Load(cfgPath, stateOptions(conf.Options{SkipSecrets: true}))
	if err != nil {
		return "", err
	}
	return cmp.Or(cfg.Control.Socket, control.DefaultPath), nil
}

// poolName asks the running daemon for the name behind a fake-IP pool address.
func poolName(cfg *conf.Config, socket string, a string) (name, note string) {
	path := cmp.Or(socket, cfg.Control.Socket, control.DefaultPath)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := dialControl(ctx, path)
	if err != nil {
		return "", a + " is in the fake-IP pool " + cfg.DNS.Pool.String() + "; the running router knows its name, but " + strings.TrimPrefix(err.Error(), "connect to the running router at ")
	}
	defer c.Close()
	req := control.Request{Op: "name"}
	if err := req.Addr.UnmarshalText([]byte(a)); err != nil {
		return "", ""
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", a + " is in the fake-IP pool, but the running router gave it to no name: a flow to it is refused"
	}
	return resp.Name, a + " is a fake IP the running router gave to " + resp.Name
}
