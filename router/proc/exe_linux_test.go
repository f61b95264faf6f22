package proc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/echotest"
	"github.com/agentcage/router/internal/roottest"
)

// TestAttributedByExecutable: a process is known by the executable it runs, not by the
// name it was started as or gives itself: one started through a link named like a
// hypervisor is attributed to its executable (App, AppPath) and its flows carry no command
// name; the process list shows the name it goes by (Comm) and its parent, for status.
func TestAttributedByExecutable(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(sleep)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "qemu-system-x86_64")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() // by PID
		cmd.Wait()
	})
	pid := cmd.Process.Pid
	f := NewLinuxFinder(LinuxFinderConfig{})
	info, err := f.info(pid)
	if err != nil {
		t.Fatal(err)
	}
	// The lookup's answer is a rules.Owner, which has no field for a name the process sets:
	// the link's name cannot appear in it.
	if info.App != filepath.Base(real) || info.AppPath != real || info.PID != pid {
		t.Errorf("lookup: %+v, want name %q, path %q", info, filepath.Base(real), real)
	}
	procs, err := f.Processes()
	if err != nil {
		t.Fatal(err)
	}
	var got *Info
	for i := range procs {
		if procs[i].PID == pid {
			got = &procs[i]
		}
	}
	switch {
	case got == nil:
		t.Errorf("process %d not listed", pid)
	case got.App != filepath.Base(real) || got.AppPath != real || got.Comm != "qemu-system-x86" || got.PPID != os.Getpid() || got.NetNS != selfNS(t):
		t.Errorf("listed: %+v, want name %q, path %q, comm qemu-system-x86, parent %d", *got, filepath.Base(real), real, os.Getpid())
	}
}

func selfNS(t *testing.T) uint64 {
	t.Helper()
	ns, err := NetNSOf("/proc/self")
	if err != nil || ns == 0 {
		t.Fatalf("this process's namespace: %d, %v", ns, err)
	}
	return ns
}

// FuzzParseStat: a command name is the process's to choose (spaces, parentheses, a
// newline): parseStat never panics and reads back the name and parent of any line the
// kernel writes.
func FuzzParseStat(f *testing.F) {
	for _, s := range []string{"VM", "NAT", "a) R 1 (b", "x y", "", ")(", "qemu-system-x86"} {
		f.Add(s, 4242)
	}
	f.Fuzz(func(t *testing.T, comm string, ppid int) {
		parseStat([]byte(comm)) // anything at all
		if ppid < 0 || len(comm) > 64 {
			return
		}
		line := fmt.Sprintf("123 (%s) S %d 123 123 0 -1 4194560 0 0 0 0\n", comm, ppid)
		c, p, ok := parseStat([]byte(line))
		if !ok || c != comm || p != ppid {
			t.Errorf("parseStat(%q) = %q, %d, %v", line, c, p, ok)
		}
	})
}

// TestMark: the mark a socket carries (the cage's, which the kernel put on a caged
// process's socket) is read from the socket's addresses, TCP and UDP; no socket is
// fs.ErrNotExist.
func TestMark(t *testing.T) {
	roottest.Require(t) // setting and reading a socket's mark needs CAP_NET_ADMIN
	const mark = 0x52434147
	f := NewLinuxFinder(LinuxFinderConfig{})
	for _, network := range []string{"tcp", "udp"} {
		for _, marked := range []bool{true, false} {
			local, remote, proto := markedConn(t, network, marked, mark)
			got, err := f.Mark(proto, local, remote)
			want := uint32(0)
			if marked {
				want = mark
			}
			if err != nil || got != want {
				t.Errorf("%s marked %v: %#x, %v; want %#x", network, marked, got, err, want)
			}
		}
	}
	_, err := f.Mark(unix.IPPROTO_TCP, netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("127.0.0.1:2"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no socket: %v, want fs.ErrNotExist", err)
	}
}

// markedConn opens a socket of network on loopback, with the mark when marked, connected
// to a listener (tcp) or sending to a peer (udp), and returns its addresses.
func markedConn(t *testing.T, network string, marked bool, mark int) (local, remote netip.AddrPort, proto byte) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			if marked {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, mark)
			}
		}); err != nil {
			return err
		}
		return serr
	}}
	var peer string
	proto = unix.IPPROTO_TCP
	if network == "tcp" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		peer = ln.Addr().String()
	} else {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		peer, proto = pc.LocalAddr().String(), unix.IPPROTO_UDP
	}
	c, err := d.Dial(network, peer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return netip.MustParseAddrPort(c.LocalAddr().String()), netip.MustParseAddrPort(c.RemoteAddr().String()), proto
}

// FuzzParseDiagMark: the mark's attribute is found in any reply without a panic.
func FuzzParseDiagMark(f *testing.F) {
	msg := make([]byte, unix.NLMSG_HDRLEN+sizeofInetDiagMsg+8)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	a := msg[unix.NLMSG_HDRLEN+sizeofInetDiagMsg:]
	binary.NativeEndian.PutUint16(a[0:], 8)
	binary.NativeEndian.PutUint16(a[2:], inetDiagMark)
	binary.NativeEndian.PutUint32(a[4:], 0x52434147)
	f.Add(msg)
	f.Add(msg[:len(msg)-2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		parseDiagMark(b, 1)
	})
}

// BenchmarkMark measures reading a connected TCP socket's mark, and a miss (the datagram
// flow's socket asked for as TCP first, see the daemon's CagedSocket).
func BenchmarkMark(b *testing.B) {
	roottest.Require(b)
	f := NewLinuxFinder(LinuxFinderConfig{})
	c, _ := echotest.TCPPair(b)
	local, remote := netip.MustParseAddrPort(c.LocalAddr().String()), netip.MustParseAddrPort(c.RemoteAddr().String())
	b.Run("hit", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.Mark(unix.IPPROTO_TCP, local, remote); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.Mark(unix.IPPROTO_UDP, local, remote); err == nil {
				b.Fatal("found")
			}
		}
	})
}
