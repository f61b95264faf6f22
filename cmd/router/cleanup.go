package main

import (
	"fmt"
	"io"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/daemon"
)

func cmdCleanup(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cleanup", "[--config FILE | --table NAME]",
		"Removes the router's capture and fail-closed guard (Linux: the nftables table it owns;\nWindows: the WFP filters of its provider), so VM traffic flows again WITHOUT the proxy.\nRun it only when you mean to take the cage down.", stderr)
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
	what, err := daemon.Cleanup(*table)
	if err != nil {
		fmt.Fprintf(stderr, "router cleanup: %v\n", err)
		return exitFindings
	}
	fmt.Fprintf(stdout, "%s: VM traffic is no longer guarded\n", what)
	return exitOK
}
