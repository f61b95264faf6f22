package main

import (
	"fmt"
	"io"
	"time"

	"github.com/agentcage/router/conf"
)

func cmdGuard(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("guard",
		"Installs the fail-closed guard alone, without the daemon: VM traffic is refused (nothing\n"+
			"is forwarded, TCP reset, DNS refused) and the host is closed to the guests, until\n"+
			"`router run` takes the guard over or `router cleanup` removes it. Run at boot by\n"+
			"router-guard.service, before the network and the hypervisors. Idempotent. When FILE\n"+
			"cannot be read, the last good guard (written by every successful install) is used\n"+
			"and the output says so.", stderr)
	cfgPath := fs.String("config", "", "the config `file`")
	if code, stop := parseFlags(fs, args, "config"); stop {
		return code
	}
	cfg, err := conf.Load(*cfgPath, stateOptions(conf.Options{SkipSecrets: true}))
	if err != nil {
		fmt.Fprintf(stderr, "router guard: %v\n", err)
		from, written, lerr := installLastGuard()
		if lerr != nil {
			fmt.Fprintf(stderr, "router guard: no guard installed: %v\n", lerr)
			return exitFindings
		}
		fmt.Fprintf(stdout, "the config cannot be read: installed the last good guard instead (from %s, written %s)\n",
			from, written.Local().Format(time.DateTime))
		return exitOK
	}
	what, err := installGuard(cfg)
	if err != nil && what == "" {
		fmt.Fprintf(stderr, "router guard: %v\n", err)
		return exitFindings
	}
	if err != nil {
		fmt.Fprintf(stderr, "router guard: warning: %v\n", err)
	}
	fmt.Fprintf(stdout, "guard installed (%s) until `router run` takes it over\n", what)
	return exitOK
}
