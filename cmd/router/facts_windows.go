package main

import (
	"os"
	"path/filepath"

	"github.com/agentcage/router/conf/lint"
	"github.com/agentcage/router/windivert/adapters"
)

// windowsFacts gathers what lint checks a config against on this machine: its VM-facing
// adapters and the VirtualBox VMs that resolve through the host. What cannot be read is
// left out (lint then says nothing about it).
func windowsFacts() lint.WindowsFacts {
	var f lint.WindowsFacts
	if as, _, err := adapters.List(adapters.NewSystem()); err == nil {
		f.Adapters = as
	}
	if home, err := os.UserHomeDir(); err == nil {
		dir := filepath.Join(home, ".VirtualBox")
		if v := os.Getenv("VBOX_USER_HOME"); v != "" {
			dir = v
		}
		f.HostResolverVMs, _ = adapters.HostResolverVMs(dir, os.ReadFile)
	}
	return f
}
