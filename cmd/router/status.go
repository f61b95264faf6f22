package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/control"
)

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status", "[--config FILE | --socket PATH] [--json]",
		"Shows the running daemon's live flows and how many flows each rule decided, over the\nlocal control channel (only root / Administrators can open it).", stderr)
	cfgPath := fs.String("config", "", "read [control] socket from this config `file`")
	socket := fs.String("socket", "", "the control socket `path` (default "+control.DefaultPath+")")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	path, err := controlPath(*cfgPath, *socket)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, path)
	if err != nil {
		fmt.Fprintf(stderr, "router status: %v (is the router running?)\n", err)
		return exitFindings
	}
	defer c.Close()
	resp, err := c.Do(control.Request{Op: "status"})
	if err != nil {
		fmt.Fprintf(stderr, "router status: %v\n", err)
		return exitFindings
	}
	st := resp.Status
	if *asJSON {
		return writeJSON(stdout, stderr, st)
	}
	fmt.Fprintf(stdout, "router running since %s (%s), pid %d, config %s\n", st.Started.Format(time.RFC3339), time.Since(st.Started).Round(time.Second), st.PID, st.Config)
	switch g := st.Guard; {
	case g.Restores > 0:
		fmt.Fprintf(stdout, "guard: restored %d times; last at %s: %s\n", g.Restores, g.LastRestore.Format(time.RFC3339), g.LastDamage)
	case g.Watched:
		fmt.Fprintln(stdout, "guard: watched, never restored")
	}
	b := st.Budgets
	fmt.Fprintf(stdout, "flows: %d of a budget of %d; set-up: %d in progress, %d waiting; forwards: %d of %d\n",
		b.Flows, b.FlowBudget, b.Setups, b.SetupWaiting, b.Forwards, b.ForwardBudget)
	fmt.Fprintf(stdout, "dns: %s", st.DNS.Mode)
	if st.DNS.Pool != "" {
		fmt.Fprintf(stdout, ", pool %s: %d of %d addresses given out, %d in use", st.DNS.Pool, st.DNS.Mapped, st.DNS.PoolSize, st.DNS.InUse)
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nRULE\tACTION\tFLOWS")
	for _, r := range st.Rules {
		act := r.Action
		if r.Proxy != "" {
			act += " via " + r.Proxy
		}
		ref := r.Name
		if r.Index > 0 {
			ref = fmt.Sprintf("#%d %s", r.Index, r.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\n", ref, act, r.Hits)
	}
	fmt.Fprintf(tw, "\nLIVE FLOWS (%d)\tSOURCE\tDESTINATION\tRULE\tACTION\tAGE\n", len(st.Flows))
	for _, f := range st.Flows {
		dst := f.Dst
		if f.Host != "" {
			dst += " (" + f.Host + ")"
		}
		src := f.Src
		if f.App != "" {
			src += " " + f.App
		}
		act := f.Action
		if f.Proxy != "" {
			act += " via " + f.Proxy
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", f.ID, src, dst, f.Rule, act, f.Age.Round(time.Second))
	}
	tw.Flush()
	return exitOK
}

// controlPath picks the control socket: --socket, else the config's [control] socket, else
// the default.
func controlPath(cfgPath, socket string) (string, error) {
	if socket != "" || cfgPath == "" {
		return cmp.Or(socket, control.DefaultPath), nil
	}
	cfg, err := conf.Load(cfgPath, conf.Options{SkipSecrets: true})
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
	c, err := control.Dial(ctx, path)
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
