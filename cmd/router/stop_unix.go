//go:build !windows

package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopDaemon sends SIGTERM to pid and waits up to wait for the process to end (a zombie
// waiting for its parent counts as ended: it runs no code).
func stopDaemon(pid int, wait time.Duration) error {
	if pid <= 0 {
		return errors.New("it did not report its process id: stop it with its service manager")
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("send SIGTERM: %w", err)
	}
	deadline := time.Now().Add(wait)
	for running(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("still running %v after SIGTERM", wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc: the signal test
	}
	// "pid (comm) state ...": comm may hold any byte, so cut at the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return true
	}
	f := strings.Fields(s[i+1:])
	return len(f) == 0 || (f[0] != "Z" && f[0] != "X")
}
