package main

import (
	"testing"
	"time"

	"github.com/agentcage/router/router/control"
)

// TestStatusKernelCaged: status shows the processes the kernel cages, by their executable,
// with the name each goes by and the caged ancestor a child is caged as.
func TestStatusKernelCaged(t *testing.T) {
	st := &control.Status{KernelCaged: []control.KernelCagedStat{
		{PID: 100, Exe: "qemu-system-x86_64", Comm: "VM"},
		{PID: 102, Exe: "sh", By: "qemu-system-x86_64", ByPID: 100},
		{PID: 103, Exe: "VBoxHeadless"},
	}}
	checkSays(t, statusText(st, time.Now()),
		"CAGED BY THE KERNEL  PID  NAMED  CAGED AS",
		"qemu-system-x86_64   100  VM     itself",
		"sh                   102         child of qemu-system-x86_64 (pid 100)",
		"VBoxHeadless         103         itself",
	)
}
