package conf

import (
	"path/filepath"
	"strings"
)

// The router's own files (the approved rules, a learning session's flow log) live in its
// state directory, not beside the config: a service's config directory is read-only to
// it (the shipped unit's ProtectSystem=strict), while the state directory is its own
// (StateDirectory=router). A key that names a file ([policy] approved, [log] flows) still
// names it relative to the config's directory when relative: what the user writes means
// what it always meant.

// DefaultStateDir is the router's state directory on goos, with getenv reading the
// environment: $STATE_DIRECTORY when set (systemd's StateDirectory= sets it; its first
// entry), else /var/lib/router on Linux and %ProgramData%\router on Windows
// (C:\ProgramData\router when the variable is unset).
func DefaultStateDir(goos string, getenv func(string) string) string {
	if d := getenv("STATE_DIRECTORY"); d != "" {
		// systemd joins several directories with ':' on every platform it runs on.
		return strings.Split(d, ":")[0]
	}
	if goos == "windows" {
		pd := getenv("ProgramData")
		if pd == "" {
			pd = `C:\ProgramData`
		}
		return strings.TrimRight(pd, `\`) + `\router`
	}
	return "/var/lib/router"
}

// stateFile is name in the state directory dir, or beside the config file when dir is
// empty (a Config parsed without Options.StateDir: tests, tools that read a file alone).
func stateFile(dir, file, name string) string {
	if dir == "" {
		dir = filepath.Dir(file)
	}
	return filepath.Join(dir, name)
}
