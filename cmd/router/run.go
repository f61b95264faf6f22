package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentcage/router/cmd/router/daemon"
	"github.com/agentcage/router/cmd/router/sdnotify"
	"github.com/agentcage/router/conf"
)

// contextT is context.Context, short for the service hooks' signatures.
type contextT = context.Context

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("run",
		runHelp, stderr)
	cfgPath := fs.String("config", "", "the config `file`")
	learning := fs.Bool("learn", false, "a learning session: caged flows no rule decides go through the proxy instead of being refused, and the flow log is on (flows.jsonl in the state directory unless [log] flows names one), for router learn")
	format := fs.String("log-format", "", "text or json (default: [log] format of the config)")
	if code, stop := parseFlags(fs, args, "config"); stop {
		return code
	}
	// The format must be known before the file is read for good; a bad file is reported by
	// daemon.Run with every error.
	if *format == "" {
		*format = conf.DefaultLogFormat
		if cfg, err := conf.Load(*cfgPath, stateOptions(conf.Options{SkipSecrets: true})); err == nil {
			*format = cfg.Log.Format
		}
	}
	// The state directory (approved rules, a learning session's flow log) is the router's
	// own: made here when missing, as systemd's StateDirectory= would.
	if err := os.MkdirAll(stateOptions(conf.Options{}).StateDir, 0o700); err != nil {
		fmt.Fprintf(stderr, "router run: make the state directory: %v\n", err)
		return exitUsage
	}
	level := new(slog.LevelVar)
	if serviceMode() {
		err := runService(level, func(log *slog.Logger, ctx contextT, reload <-chan struct{}, ready chan<- struct{}) error {
			if err := checkServiceConfig(*cfgPath); err != nil {
				log.Error("the config is refused: the guard stays and blocks the caged apps", "err", err)
				return err
			}
			return daemon.Run(ctx, daemon.Options{
				ConfigPath: *cfgPath, Platform: newPlatform(log.With("component", "capture")),
				Log: log, Level: level, Reload: reload, Ready: ready, Load: loader(*learning),
			})
		})
		if err != nil {
			fmt.Fprintf(stderr, "router run: %v\n", err)
			return exitUsage
		}
		return exitOK
	}
	var h slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	if *format == "json" {
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(h)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := make(chan struct{}, 1)
	go func() {
		for range hup {
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	}()
	if *learning {
		log.Warn("a learning session: caged flows that no rule decides go through the proxy and are recorded in the flow log; `router learn --config FILE --suggest` then proposes an allow-list")
	}
	// Under systemd (router.service is Type=notify) the start ends when the capture is
	// installed; a daemon that exits first fails `systemctl start`.
	ready, ran := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-ready:
			if err := sdnotify.Notify(os.Getenv("NOTIFY_SOCKET"), sdnotify.Ready); err != nil {
				log.Warn("could not tell systemd the router runs", "err", err)
			}
		case <-ran:
		}
	}()
	err := daemon.Run(ctx, daemon.Options{
		ConfigPath: *cfgPath,
		Platform:   newPlatform(log.With("component", "capture")),
		Log:        log,
		Level:      level,
		Reload:     reload,
		Ready:      ready,
		Load:       loader(*learning),
	})
	close(ran)
	if err != nil {
		fmt.Fprintf(stderr, "router run: %v\n", err)
		fmt.Fprintf(stderr, "router run: %s\n", guardNote(*cfgPath))
		return exitUsage
	}
	return exitOK
}

// loader is how the daemon reads the config (at start and at each reload): as it is, for
// the state directory; with learning, made a learning session's (conf.Learning).
func loader(learning bool) func(string) (*conf.Config, error) {
	return func(path string) (*conf.Config, error) {
		c, err := conf.Load(path, stateOptions(conf.Options{}))
		if err != nil || !learning {
			return c, err
		}
		if err := conf.Learning(c, path); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return c, nil
	}
}

// guardNote says, after a failed start, whether the guard is still closing the cage.
func guardNote(cfgPath string) string {
	table := conf.DefaultTable
	if cfg, err := conf.Load(cfgPath, stateOptions(conf.Options{SkipSecrets: true})); err == nil {
		table = cfg.Capture.Table
	}
	switch ok, err := guardInstalled(table); {
	case err != nil:
		return fmt.Sprintf("whether a guard is in place is unknown (%v)", err)
	case ok:
		return "the guard stays in place: VM traffic remains blocked until a router runs (`router cleanup` removes it)"
	default:
		return "no guard is in place: VM traffic is NOT blocked; `router guard --config FILE` installs it"
	}
}
