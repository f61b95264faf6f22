//go:build !linux

package bench

import (
	"errors"
	"syscall"
)

func daemonAttr() *syscall.SysProcAttr { return nil }

func signalPID(int, bool) error { return errors.ErrUnsupported }
