package cagemark

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/roottest"
)

func TestKeys(t *testing.T) {
	keys, skipped := Keys([]string{"passt.avx2", "qemu-system-*", "qemu-system-x86_64", "/usr/bin/x", "a?b", "passt.avx2"})
	if want := []string{"/usr/bin/x", "a?b"}; !slices.Equal(skipped, want) {
		t.Errorf("skipped %q, want %q", skipped, want)
	}
	want := []struct {
		bits int
		data string
	}{{88, "passt.avx2\x00"}, {96, "qemu-system-"}, {152, "qemu-system-x86_64\x00"}}
	if len(keys) != len(want) {
		t.Fatalf("%d keys, want %d", len(keys), len(want))
	}
	for i, w := range want {
		k := keys[i]
		if len(k) != keySize {
			t.Errorf("key %d: %d bytes", i, len(k))
		}
		if got := int(k[0]) | int(k[1])<<8; got != w.bits { // little endian in the tests' machines
			t.Errorf("key %d: %d bits, want %d", i, got, w.bits)
		}
		if got := string(bytes.TrimRight(k[4:], "\x00")) + strings.Repeat("\x00", strings.Count(w.data, "\x00")); got != w.data {
			t.Errorf("key %d: %q, want %q", i, got, w.data)
		}
	}
}

// sockMark opens a TCP socket over IPv6 in the namespace fd (0: this one) on a thread of its
// own and returns the socket's mark.
func sockMark(t *testing.T, fd int) uint32 {
	t.Helper()
	var m int
	var err error
	inNS(t, fd, func() { m, err = socketMark(unix.AF_INET6) })
	if err != nil {
		t.Fatal(err)
	}
	return uint32(m)
}

// inNS runs fn on a thread of its own in the namespace fd (0: this one).
func inNS(t *testing.T, fd int, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		if fd != 0 {
			if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
				t.Error(err)
				return
			}
		}
		fn()
	}()
	<-done
}

// TestMarksCagedSockets: a program installed for a namespace marks the sockets a process
// of a caged name opens there, and only those: not this process's in another namespace,
// not another command's in the same one; a reload changes the names in place; Remove
// ends it.
func TestMarksCagedSockets(t *testing.T) {
	roottest.Require(t, "ip")
	name, fd := testNetNS(t, "cagemark")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	self := filepath.Base(exe)
	const mark = 0x52434147
	// Sockets opened before the program (a NAT's pool opened at its start).
	var early [2]int
	inNS(t, fd, func() {
		var err error
		if early[0], err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0); err != nil {
			t.Error(err)
		}
		if early[1], err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err != nil {
			t.Error(err)
		}
	})
	defer unix.Close(early[0])
	defer unix.Close(early[1])
	if err := Install(Config{Names: []string{"slirp4netns", self}, Mark: mark, NetNS: fd}); err != nil {
		t.Fatal(err)
	}
	if got := sockMark(t, fd); got != mark {
		t.Errorf("caged name %q in its namespace: mark %#x, want %#x", self, got, mark)
	}
	if got := sockMark(t, 0); got != 0 {
		t.Errorf("caged name in another namespace: mark %#x, want 0", got)
	}
	// The early sockets: a connect marks the one, an unconnected datagram of the other is
	// refused.
	inNS(t, fd, func() {
		unix.Connect(early[0], &unix.SockaddrInet4{Port: 1, Addr: [4]byte{127, 0, 0, 1}})
		if m, err := unix.GetsockoptInt(early[0], unix.SOL_SOCKET, unix.SO_MARK); err != nil || m != mark {
			t.Errorf("a socket opened before, connected after: mark %#x (%v), want %#x", m, err, mark)
		}
		err := unix.Sendto(early[1], []byte("x"), 0, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}})
		if !errors.Is(err, unix.EPERM) {
			t.Errorf("a datagram from an unmarked socket opened before: %v, want EPERM", err)
		}
	})
	// Another command in the namespace, a child of this caged process: python3 reads its
	// own socket's mark.
	py := pythonMark(t, name)
	if py != "" && py != fmt.Sprint(mark) {
		t.Errorf("python3, a child of this caged process, in the namespace: mark %q, want %d", py, mark)
	}
	names, m, ok, err := Installed(fd)
	if err != nil || !ok || m != mark || !slices.Contains(names, self) || !slices.Contains(names, "slirp4netns") {
		t.Errorf("Installed: %q %#x %v %v", names, m, ok, err)
	}

	// A reload without this command's name: its new sockets are not marked; one program.
	if err := Install(Config{Names: []string{"slirp4netns", "passt.avx2"}, Mark: mark, NetNS: fd}); err != nil {
		t.Fatal(err)
	}
	if got := sockMark(t, fd); got != 0 {
		t.Errorf("after the reload: mark %#x, want 0", got)
	}
	if py := pythonMark(t, name); py != "" && py != "0" {
		t.Errorf("python3 in the namespace, nothing of its line caged: mark %q, want 0", py)
	}
	names, _, _, _ = Installed(fd)
	slices.Sort(names)
	if want := []string{"passt.avx2", "slirp4netns"}; !slices.Equal(names, want) {
		t.Errorf("after the reload: names %q, want %q", names, want)
	}
	if err := Install(Config{Names: []string{self[:3] + "*"}, Mark: mark, NetNS: fd}); err != nil {
		t.Fatal(err)
	}
	if got := sockMark(t, fd); got != mark {
		t.Errorf("prefix %q*: mark %#x, want %#x", self[:3], got, mark)
	}
	if err := Remove(fd); err != nil {
		t.Fatal(err)
	}
	if got := sockMark(t, fd); got != 0 {
		t.Errorf("after Remove: mark %#x, want 0", got)
	}
	if _, _, ok, _ := Installed(fd); ok {
		t.Error("Installed after Remove")
	}
}

// pythonMark runs python3 in the namespace name, which prints its own socket's mark; ""
// when there is no python3.
func pythonMark(t *testing.T, name string) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		return ""
	}
	out, err := exec.Command("ip", "netns", "exec", name, py, "-c",
		"import socket;s=socket.socket();print(s.getsockopt(socket.SOL_SOCKET,36))").CombinedOutput()
	if err != nil {
		t.Errorf("python3 in the namespace: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}
