//go:build linux

package lab

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"github.com/agentcage/router/router/nftcap/cagemark"
	"golang.org/x/sys/unix"
)

// supported reports whether this system can build a lab.
const supported = true

// netnsRunDir is where `ip netns add` pins named namespaces.
const netnsRunDir = "/run/netns"

// openNetns opens the named namespace and the process's own namespace (as seen by a thread
// that is in no Do, which is every unlocked thread).
func openNetns(name string) (fd, home int, err error) {
	fd, err = unix.Open(netnsRunDir+"/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("open namespace %s: %w", name, err)
	}
	type result struct {
		fd  int
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		h, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		res <- result{h, err}
	}()
	r := <-res
	if r.err != nil {
		unix.Close(fd)
		return -1, -1, fmt.Errorf("open own namespace: %w", r.err)
	}
	return fd, r.fd, nil
}

func setns(fd int) error { return unix.Setns(fd, unix.CLONE_NEWNET) }

func closeFD(fd int) error { return unix.Close(fd) }

// daemonAttr puts a started server in its own process group (so its forked children can be
// ended with it) and asks the kernel to kill it if the starting thread dies. The latter is a
// best effort: a server that changes its credentials (danted does) loses it, which is why
// Cleanup also ends what is left in stale namespaces.
func daemonAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func terminate(pid int) error { return unix.Kill(pid, unix.SIGTERM) }

func kill(pid int) error { return unix.Kill(pid, unix.SIGKILL) }

// killGroup ends every process of the group pgid; a group already gone is not an error.
func killGroup(pgid int) error {
	if err := unix.Kill(-pgid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

func isRoot() bool { return os.Geteuid() == 0 }

// removeCageMark detaches the caged-socket program a router installed for ns.
func removeCageMark(ns *Netns) error {
	return ns.Do(func() error { return cagemark.Remove(0) })
}
