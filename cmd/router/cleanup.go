package main

import (
	"fmt"
	"io"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/daemon"
)

func cmdCleanup(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cleanup", "[--config FILE | --table NAME]",
		"Removes the router's capture and fail-closed guard (the nftables table it owns), so VM\ntraffic flows again WITHOUT the proxy. Run it only when you mean to take the cage down.", stderr)
	cfgPath := fs.String("config", "", "read the table name from this config `file`")
	table := fs.String("table", conf.DefaultTable, "the table `name`")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if *cfgPath != "" {
		cfg, err := conf.Load(*cfgPath, conf.Options{SkipSecrets: true})
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
		*table = cfg.Capture.Table
	}
	if err := daemon.Cleanup(*table); err != nil {
		fmt.Fprintf(stderr, "router cleanup: %v\n", err)
		return exitFindings
	}
	fmt.Fprintf(stdout, "removed the capture table %q: VM traffic is no longer guarded\n", *table)
	return exitOK
}
