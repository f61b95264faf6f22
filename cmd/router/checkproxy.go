package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/agentcage/router/cmd/router/checkip"
	"github.com/agentcage/router/cmd/router/daemon"
	"github.com/agentcage/router/cmd/router/proxycheck"
	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/upstream"
)

func cmdCheckProxy(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check-proxy",
		"Tests each upstream proxy from this host: can it be reached, does it take the\n"+
			"credentials, which address does an IP-echo service see through it, does the echo's host\n"+
			"name resolve through it (at [dns] resolver), and how long a connect through it takes.\n"+
			"Exits 1 when a check fails. The password is never printed.", stderr)
	cfgPath := fs.String("config", "", "the config `file`")
	only := fs.String("proxy", "", "check only this [proxy.`NAME`]")
	var echo stringList
	fs.Var(&echo, "echo", "an IP-echo `URL` to fetch through the proxy (repeatable; default: well-known public ones)")
	timeout := fs.Duration("timeout", 10*time.Second, "bound of each check")
	asJSON := jsonFlag(fs)
	if code, stop := parseFlags(fs, args, "config"); stop {
		return code
	}
	cfg, err := conf.Load(*cfgPath, stateOptions(conf.Options{}))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if len(echo) == 0 {
		echo = checkip.DefaultEcho()
	}
	d := &net.Dialer{Control: ownControl(cfg.Capture.Mark)}
	opts := proxycheck.Options{Dial: d.DialContext, Echo: echo, Timeout: *timeout}
	if cfg.DNS.Mode == conf.DNSProxy || cfg.DNS.Resolver != "" {
		opts.Resolver = cfg.DNS.Resolver
	}
	var reports []*proxycheck.Report
	found := false
	checked := map[string]bool{}
	for _, px := range cfg.Proxies {
		if *only != "" && px.Name != *only {
			continue
		}
		found = true
		// A chain is reported hop by hop: the proxies it goes through first (each alone,
		// once), then the proxy through them.
		hops := []conf.Proxy{px}
		for p := px; p.Via != ""; {
			next, ok := cfg.Proxy(p.Via)
			if !ok {
				break
			}
			p = *next
			hops = append([]conf.Proxy{p}, hops...)
		}
		var via upstream.Upstream
		for _, hop := range hops {
			u := daemon.UpstreamConfig(hop)
			o := opts
			o.Via = via
			if !checked[hop.Name] {
				checked[hop.Name] = true
				reports = append(reports, proxycheck.Check(context.Background(), u.Config, o))
			}
			next, err := upstream.New(u.Config, upstream.Options{Dial: opts.Dial, Via: via, Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
				return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			}})
			if err != nil {
				break // reported by the hop's own check
			}
			via = next
		}
	}
	if !found {
		fmt.Fprintf(stderr, "router check-proxy: no [proxy.%s] in %s\n", *only, cfg.File)
		return exitUsage
	}
	code := exitOK
	for _, r := range reports {
		if !r.OK() {
			code = exitFindings
		}
	}
	if *asJSON {
		if c := writeJSON(stdout, stderr, reports); c != exitOK {
			return c
		}
		return code
	}
	for _, r := range reports {
		fmt.Fprintf(stdout, "proxy %s (%s, %s)\n", r.Proxy, r.Type, r.Address)
		for _, s := range r.Steps {
			mark := "ok  "
			switch {
			case s.Skip:
				mark = "skip"
			case !s.OK:
				mark = "FAIL"
			}
			took := ""
			if s.Took > 0 {
				took = " (" + roundTook(s.Took) + ")"
			}
			fmt.Fprintf(stdout, "  %-5s %s %s%s\n", s.Name, mark, s.Detail, took)
		}
		if r.OK() {
			fmt.Fprintf(stdout, "  => ok: exit %s, connect through it %s\n", r.Exit, roundTook(r.Latency))
		} else {
			fmt.Fprintf(stdout, "  => FAILED: %s\n", r.Error)
		}
	}
	return code
}

// roundTook rounds a duration for reading: to the millisecond, or the microsecond below one.
func roundTook(d time.Duration) string {
	if d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
