package router

import (
	"fmt"

	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// slowSetup is set by ROUTER_TEST_SLOW_SETUP=1: every test router sets its flows up on
// goroutines (Options.GoroutineSetup), so that the suite runs on both paths.
var slowSetup = os.Getenv("ROUTER_TEST_SLOW_SETUP") == "1"

// withLoop gives a test router what its event loops need to set flows up themselves: the
// test's Original, asked with a connection made for the descriptor (a cost only tests pay),
// and connects that go to loopback only, through the test's control (the mark's stand-in).
// With slowSetup, it turns the loops' set-up off instead.
func withLoop(opts *Options, control func(network, address string, c syscall.RawConn) error) {
	if slowSetup {
		opts.GoroutineSetup = true
		return
	}
	orig := opts.Original
	if opts.OriginalFD == nil {
		opts.OriginalFD = func(fd int, _ netip.AddrPort) (netip.AddrPort, netip.AddrPort, error) {
			dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return netip.AddrPort{}, netip.AddrPort{}, err
			}
			c, err := fileConn(dup)
			if err != nil {
				return netip.AddrPort{}, netip.AddrPort{}, err
			}
			defer c.Close()
			return orig(c)
		}
	}
	if opts.ConnectFD == nil {
		opts.ConnectFD = func(dst netip.AddrPort) (int, error) {
			if !private(dst).Addr().IsLoopback() {
				return -1, fmt.Errorf("the tests dial loopback only, not %v", dst)
			}
			var raw rawFD
			fd, _, err := dialFD(&raw, control, private(dst))
			return fd, err
		}
	}
}
