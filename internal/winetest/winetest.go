// Package winetest holds what tests need to run as Windows binaries under Wine 8 too (see
// tools/wine-go): it is imported by tests only.
package winetest

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TempDir is t.TempDir for tests that also run under Wine 8, whose NT layer lacks what Go
// 1.26's os.RemoveAll uses on Windows ("unlinkat ...: Invalid function"): it removes the
// directory entry by entry with os.Remove, children before parents.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "router-test-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var paths []string
		filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err == nil {
				paths = append(paths, p)
			}
			return nil
		})
		slices.Reverse(paths)
		for _, p := range paths {
			if err := os.Remove(p); err != nil {
				t.Errorf("clean up temporary directory: %v", err)
			}
		}
	})
	return dir
}

// UDPUsable reports whether this process can open UDP sockets. It is false only under Wine 8,
// whose ws2_32 lacks SIO_UDP_NETRESET, which Go (1.23 and later) sets on every UDP socket on
// Windows (go.dev/issue/68614), so that no UDP socket can be made at all; it is true on Linux
// and on real Windows. Any other failure ends the test. A test that gets false logs it (this
// does) and asserts what the code does without UDP instead of skipping.
func UDPUsable(t testing.TB) bool {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err == nil {
		pc.Close()
		return true
	}
	if runtime.GOOS == "windows" && strings.Contains(err.Error(), "wsaioctl") && errors.Is(err, syscall.Errno(10045)) {
		t.Logf("no UDP sockets here (%v): Wine lacks SIO_UDP_NETRESET", err)
		return false
	}
	t.Fatalf("listen udp: %v", err)
	return false
}
