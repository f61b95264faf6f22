package main

import (
	"cmp"
	"fmt"
	"io"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/control"
)

func cmdGuard(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("guard",
		"Installs the fail-closed guard alone, without the daemon: VM traffic is refused (nothing\n"+
			"is forwarded, TCP reset, DNS refused) and the host is closed to the guests, until\n"+
			"`router run` takes the guard over or `router cleanup` removes it. Run at boot by\n"+
			"router-guard.service, before the network and the hypervisors. Idempotent. When FILE\n"+
			"cannot be read, the last good guard (written by every successful install) is used\n"+
			"and the output says so. On Linux, while a router runs it leaves the router's table\n"+
			"alone (the router keeps it).", stderr)
	cfgPath := fs.String("config", "", "the config `file`")
	if code, stop := parseFlags(fs, args, "config"); stop {
		return code
	}
	cfg, err := conf.Load(*cfgPath, stateOptions(conf.Options{SkipSecrets: true}))
	if guardYields {
		path := control.DefaultPath
		if err == nil {
			path = cmp.Or(cfg.Control.Socket, control.DefaultPath)
		}
		if st, ok := runningDaemon(path); ok {
			fmt.Fprintf(stdout, "a router is running (pid %d, config %s) and keeps its own table: the guard leaves it as it is\n", st.PID, st.Config)
			return exitOK
		}
	}
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
