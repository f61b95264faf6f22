package main

import (
	"context"
	"io"
	"os"
	"os/signal"

	"github.com/agentcage/router/cmd/router/checkip"
)

// cmdCheckIP runs `router check-ip` with the system's network (no seams replaced); Ctrl-C ends
// the checks early. Its exit codes are checkip's: exitOK, exitFindings and exitUsage, plus
// checkip.ExitNoAnswer (3) when no echo endpoint answered.
func cmdCheckIP(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return checkip.Main(ctx, args, stdout, stderr, checkip.Deps{})
}
