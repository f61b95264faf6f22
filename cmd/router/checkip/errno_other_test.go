//go:build !windows

package checkip

import "syscall"

// errNoRoute is the error a dial returns when there is no route.
func errNoRoute() error { return syscall.ENETUNREACH }
