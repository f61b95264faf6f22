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

func runService(level slog.Leveler, run func(log *slog.Logger, ctx contextT, reload <-chan struct{}) error) error {
	return fmt.Errorf("not a Windows service")
}
