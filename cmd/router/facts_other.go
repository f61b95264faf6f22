//go:build !windows

package main

import "github.com/agentcage/router/conf/lint"

// windowsFacts knows nothing on another OS: lint --os windows judges the file alone.
func windowsFacts() lint.WindowsFacts { return lint.WindowsFacts{} }
