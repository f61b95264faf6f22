//go:build unix

package proxifier_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time this process has used (user and system): unlike the wall clock,
// it does not grow while the process waits for a busy machine's CPU.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
