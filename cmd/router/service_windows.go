package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/agentcage/router/service"
	"github.com/agentcage/router/windivert/dist"
)

func cmdService(args []string, stdout, stderr io.Writer) int {
	usage := "usage: router service install --config FILE | uninstall | start | stop"
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "install":
		fs := newFlags("service install", "--config FILE",
			"Installs the router as a Windows service (automatic start, restart on failure) that runs\n`router run --config FILE`, and writes the pinned WinDivert 2.2.2 files beside router.exe.", stderr)
		cfgPath := fs.String("config", "", "the config `file` (an absolute path)")
		if code, stop := parseFlags(fs, args[1:]); stop {
			return code
		}
		if *cfgPath == "" {
			fmt.Fprintln(stderr, "router service install: --config is required")
			return exitUsage
		}
		var exe, cfg string
		if exe, err = os.Executable(); err == nil {
			if cfg, err = filepath.Abs(*cfgPath); err == nil {
				if err = dist.Install(filepath.Dir(exe)); err == nil {
					err = service.Install(exe, cfg)
				}
			}
		}
	case "uninstall":
		err = service.Uninstall()
	case "start":
		err = service.Start()
	case "stop":
		err = service.Stop()
	default:
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "router service %s: %v\n", args[0], err)
		return exitFindings
	}
	fmt.Fprintf(stdout, "router service %s: done\n", args[0])
	return exitOK
}

// serviceMode reports whether the service manager started this process; then the daemon
// runs under it and logs to the event log.
func serviceMode() bool { return service.IsService() }

func runService(level slog.Leveler, run func(log *slog.Logger, ctx contextT, reload <-chan struct{}) error) error {
	h, closeLog, err := service.EventLogHandler(level)
	if err != nil {
		return err
	}
	defer closeLog()
	log := slog.New(h)
	return service.Run(func(ctx contextT, reload <-chan struct{}) error { return run(log, ctx, reload) })
}

// runHelp is `router run --help`'s summary on this operating system.
const runHelp = "Runs the daemon in the foreground: captures (WinDivert), decides, relays. A service\n" +
	"control reload (or SIGHUP elsewhere) re-reads the config (a broken file is reported and\n" +
	"the running rules stay). Ctrl-C stops it. Needs an elevated prompt. The persistent WFP\n" +
	"guard (`router guard`, `router service install`) keeps the caged apps blocked whenever\n" +
	"no router runs; without it, VM traffic is NOT blocked once the process ends."
