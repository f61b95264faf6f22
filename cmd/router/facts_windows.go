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
	if as, wsl, err := adapters.List(adapters.NewSystem()); err == nil {
		f.Adapters, f.WSL = as, wsl
	}
	if dir := vboxDir(); dir != "" {
		f.HostResolverVMs, _ = adapters.HostResolverVMs(dir, os.ReadFile)
	}
	f.Bridged = bridgedVMs()
	return f
}

// vboxDir is the user's VirtualBox settings directory ("" when unknown).
func vboxDir() string {
	if v := os.Getenv("VBOX_USER_HOME"); v != "" {
		return v
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".VirtualBox")
	}
	return ""
}

// bridgedVMs are this user's VirtualBox and VMware VMs with a bridged adapter; none when
// their files cannot be read.
func bridgedVMs() []adapters.Bridged {
	inv := ""
	if d := os.Getenv("APPDATA"); d != "" {
		inv = filepath.Join(d, "VMware", "inventory.vmls")
	}
	bs, _ := adapters.BridgedVMs(vboxDir(), inv, os.ReadFile)
	return bs
}
