package main

import "golang.org/x/sys/windows"

// hostPrivileged is privileged for this process: whether its token is elevated.
func hostPrivileged() (bool, error) {
	return windows.GetCurrentProcessToken().IsElevated(), nil
}
