//go:build !windows

package router

import "syscall"

// descriptorLimit is the number of file descriptors this process may hold (the soft
// RLIMIT_NOFILE, which Go raises to the hard limit at start); 0 when unknown.
func descriptorLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}
