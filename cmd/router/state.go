package main

import (
	"os"
	"runtime"

	"github.com/agentcage/router/conf"
)

// stateOptions is o with the router's state directory (conf.DefaultStateDir: systemd's
// $STATE_DIRECTORY, else /var/lib/router; %ProgramData%\router on Windows), where the
// approved rules and a learning session's flow log default to. Every command reads the
// config through it, so that each finds those files where the daemon writes them.
func stateOptions(o conf.Options) conf.Options {
	o.StateDir = conf.DefaultStateDir(runtime.GOOS, os.Getenv)
	return o
}
