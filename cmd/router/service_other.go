//go:build !windows

package main

import (
	"fmt"
	"io"
	"log/slog"
)

func cmdService(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "router service: Windows only; on Linux install dist/router.service (systemd), see README.md")
	return exitUsage
}

func serviceMode() bool { return false }

func checkServiceConfig(string) error { return nil }

func runService(level slog.Leveler, run func(log *slog.Logger, ctx contextT, reload <-chan struct{}, ready chan<- struct{}) error) error {
	return fmt.Errorf("not a Windows service")
}

// runHelp is `router run --help`'s summary on this operating system.
const runHelp = "Runs the daemon in the foreground: captures, decides, relays. SIGHUP reloads the config\n" +
	"(a broken file is reported and the running rules stay). SIGTERM or Ctrl-C stops it and\n" +
	"leaves the nftables guard in place, so VM traffic stays blocked until a router runs again\n" +
	"or `router cleanup` removes it; so does a crash, and a start that fails. Needs root\n" +
	"(nftables, socket marks)."
