//go:build !linux && !windows

package daemon

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentcage/router/conf"
)

var errNoGuard = fmt.Errorf("a guard is not built on this operating system: %w", errors.ErrUnsupported)

// StateDir is where the last good guard would be kept.
func StateDir() string { return "" }

// InstallGuard installs the guard for cfg.
func InstallGuard(cfg *conf.Config) (string, error) { return "", errNoGuard }

// InstallLastGuard installs the last good guard.
func InstallLastGuard() (string, time.Time, error) { return "", time.Time{}, errNoGuard }

// GuardInstalled reports whether the guard is in place.
func GuardInstalled(table string) (bool, error) { return false, errNoGuard }
