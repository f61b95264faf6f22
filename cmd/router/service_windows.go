package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentcage/router/cmd/router/service"
	"github.com/agentcage/router/conf"
)

func cmdService(args []string, stdout, stderr io.Writer) int {
	usage := "usage: router service " + usageOf("service")
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "install":
		fs := newFlagsUsage("service install", serviceInstallUsage,
			"Installs the router as a Windows service: copies router.exe and the pinned WinDivert\n"+
				"2.2.2 files to %ProgramFiles%\\router (a directory only administrators may write),\n"+
				"creates the service (automatic start, restart on failure) that runs `router run --config\n"+
				"FILE`, and installs the persistent WFP guard, which blocks the caged apps from now on\n"+
				"whenever no router runs. Run it from an elevated prompt.", stderr)
		cfgPath := fs.String("config", "", "the config `file` (an absolute path)")
		var env envFlags
		fs.Var(&env, "env", "`NAME=VALUE` in the service's environment (repeatable; e.g. the proxy password for password_env; local users can read it, password_file keeps it from them)")
		if code, stop := parseFlags(fs, args[1:], "config"); stop {
			return code
		}
		return serviceInstall(*cfgPath, env, stdout, stderr)
	case "uninstall":
		if err := service.Uninstall(); err != nil {
			fmt.Fprintf(stderr, "router service uninstall: %v\n", err)
			return exitFindings
		}
		what, err := cleanup("")
		if err != nil {
			fmt.Fprintf(stderr, "router service uninstall: the service is gone, but the guard stays: %v\n", err)
			return exitFindings
		}
		fmt.Fprintf(stdout, "router service uninstall: done; %s: VM traffic is no longer guarded (the files in Program Files stay)\n", what)
		return exitOK
	case "upgrade":
		exe, err := os.Executable()
		if err == nil {
			err = service.UpgradeInPlace(exe, func() (bool, error) { return guardInstalled("") })
		}
		if err != nil {
			fmt.Fprintf(stderr, "router service upgrade: %v\n", err)
			return exitFindings
		}
		fmt.Fprintln(stdout, "router service upgrade: done; the guard stayed in place throughout")
		return exitOK
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

// serviceInstall installs the service and, once its files are in Program Files, the guard
// naming the installed router.exe and the service's SID.
func serviceInstall(cfgPath string, env []string, stdout, stderr io.Writer) int {
	cfgFile, err := filepath.Abs(cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "router service install: %v\n", err)
		return exitUsage
	}
	cfg, err := conf.Load(cfgFile, stateOptions(conf.Options{SkipSecrets: true}))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if err := service.CheckTrusted(trustedFiles(cfg)...); err != nil {
		fmt.Fprintf(stderr, "router service install: %v\n", err)
		return exitUsage
	}
	exe, err := os.Executable()
	if err == nil {
		err = service.Install(exe, cfgFile, env...)
	}
	if err != nil {
		fmt.Fprintf(stderr, "router service install: %v\n", err)
		return exitFindings
	}
	dir, err := service.InstallDir()
	if err != nil {
		fmt.Fprintf(stderr, "router service install: %v\n", err)
		return exitFindings
	}
	what, err := installGuardForService(cfg, filepath.Join(dir, "router.exe"), service.Name)
	if err != nil {
		fmt.Fprintf(stderr, "router service install: the service is installed, but the guard is not: %v\n", err)
		return exitFindings
	}
	fmt.Fprintf(stdout, "router service install: done (%s); start it with `router service start`\n", what)
	return exitOK
}

// envFlags collects repeated --env NAME=VALUE flags.
type envFlags []string

func (e *envFlags) String() string { return fmt.Sprint(len(*e), " variables") }

func (e *envFlags) Set(v string) error {
	if name, _, ok := strings.Cut(v, "="); !ok || name == "" {
		return fmt.Errorf("want NAME=VALUE")
	}
	*e = append(*e, v)
	return nil
}

// checkServiceConfig refuses, under the service manager, a config (or password file) that
// non-administrators may change: see service.CheckTrusted.
func checkServiceConfig(path string) error {
	cfg, err := conf.Load(path, stateOptions(conf.Options{SkipSecrets: true}))
	if err != nil {
		return nil // daemon.Run reports it with every error
	}
	return service.CheckTrusted(trustedFiles(cfg)...)
}

// runService runs the daemon under the service manager: "running" is reported only once
// the capture is armed (the daemon's Ready), and a failure exits with a service-specific
// error so the manager's recovery actions restart it.
func runService(level slog.Leveler, run func(log *slog.Logger, ctx contextT, reload <-chan struct{}, ready chan<- struct{}) error) error {
	h, closeLog, err := service.EventLogHandler(level)
	if err != nil {
		return err
	}
	defer closeLog()
	// One event log record per flow would flood the Application log: they are summarized.
	h, flush := service.SummarizeFlows(h, time.Minute, time.Now)
	defer flush()
	log := slog.New(h)
	return service.RunDaemon(service.RunOptions{}, func(ctx contextT, reload <-chan struct{}, armed func()) error {
		ready := make(chan struct{})
		go func() {
			select {
			case <-ready:
				armed()
			case <-ctx.Done():
			}
		}()
		return run(log, ctx, reload, ready)
	})
}

// runHelp is `router run --help`'s summary on this operating system.
const runHelp = "Runs the daemon in the foreground: installs (or updates) the persistent WFP guard, captures\n" +
	"(WinDivert), decides, relays. As a service, `sc control router paramchange` re-reads the\n" +
	"config (a broken file is reported and the running rules stay). Ctrl-C stops it. Needs an\n" +
	"elevated prompt. The guard blocks the caged apps (hypervisors, the apps of proxy and block\n" +
	"rules) whenever no router runs: after a stop, a crash, a failed start and at boot, until\n" +
	"`router cleanup` removes it."
