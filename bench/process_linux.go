package bench

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

func daemonAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalPID sends SIGTERM to pid, or SIGKILL to its process group (which it leads).
func signalPID(pid int, kill bool) error {
	var err error
	if kill {
		err = unix.Kill(-pid, unix.SIGKILL)
	} else {
		err = unix.Kill(pid, unix.SIGTERM)
	}
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}
