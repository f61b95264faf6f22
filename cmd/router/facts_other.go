//go:build !windows

package main

import (
	"github.com/agentcage/router/conf/lint"
	"github.com/agentcage/router/windivert/adapters"
)

// windowsFacts knows nothing on another OS: lint --os windows judges the file alone.
func windowsFacts() lint.WindowsFacts { return lint.WindowsFacts{} }

// bridgedVMs: no VMs are read on another OS.
func bridgedVMs() []adapters.Bridged { return nil }
