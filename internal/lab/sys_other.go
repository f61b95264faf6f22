//go:build !linux

package lab

import (
	"errors"
	"syscall"
)

// supported reports whether this system can build a lab.
const supported = false

const netnsRunDir = "/run/netns"

var errUnsupported = errors.New("lab: network namespaces need linux")

func openNetns(string) (int, int, error) { return -1, -1, errUnsupported }

func setns(int) error { return errUnsupported }

func closeFD(int) error { return nil }

func daemonAttr() *syscall.SysProcAttr { return nil }

func terminate(int) error { return errUnsupported }

func kill(int) error { return errUnsupported }

func killGroup(int) error { return errUnsupported }

func isRoot() bool { return false }

func removeCageMark(*Netns) error { return nil }
