package cagemark

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// addNetNS adds the network namespace name for tb, deleted at its end, and returns a
// descriptor of it, which the caller closes.
func addNetNS(tb testing.TB, name string) int {
	tb.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		tb.Fatalf("ip netns add: %v: %s", err, out)
	}
	tb.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return fd
}

// testNetNS adds a network namespace for tb, named prefix and this process's ID, and returns
// its name and a descriptor of it. At tb's end, after the cleanups registered later, the
// programs installed for it are removed, the descriptor is closed and the namespace deleted.
func testNetNS(tb testing.TB, prefix string) (string, int) {
	tb.Helper()
	name := fmt.Sprintf("%s%d", prefix, os.Getpid())
	fd := addNetNS(tb, name)
	tb.Cleanup(func() { unix.Close(fd) })
	tb.Cleanup(func() {
		if err := Remove(fd); err != nil {
			tb.Error(err)
		}
	})
	return name, fd
}

// socketMark makes a TCP socket of family (unix.AF_INET, unix.AF_INET6) and returns the
// mark it was created with.
func socketMark(family int) (int, error) {
	s, err := unix.Socket(family, unix.SOCK_STREAM, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(s)
	return unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_MARK)
}
