package proc

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/rules"
)

// loopbackConn opens a TCP connection to a listener on addr ("127.0.0.1:0" or "[::1]:0")
// and returns the client side, closed in t.Cleanup.
func loopbackConn(t testing.TB, addr string) *net.TCPConn {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return c.(*net.TCPConn)
}

func tuple(c net.Conn) (local, remote netip.AddrPort) {
	return c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
}

func selfInfo(t testing.TB) rules.Owner {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return rules.Owner{PID: os.Getpid(), App: filepath.Base(exe), AppPath: exe}
}

func TestLookupTCPSelf(t *testing.T) {
	want := selfInfo(t)
	f := NewLinuxFinder(LinuxFinderConfig{})
	for _, tc := range []struct{ name, addr string }{
		{"ipv4", "127.0.0.1:0"},
		{"ipv6", "[::1]:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := loopbackConn(t, tc.addr)
			local, remote := tuple(c)
			for _, round := range []string{"first", "cached"} {
				got, err := f.LookupTCP(local, remote)
				if err != nil {
					t.Fatalf("%s LookupTCP(%v, %v): %v", round, local, remote, err)
				}
				if got.PID != want.PID || got.App != want.App || got.AppPath != want.AppPath {
					t.Errorf("%s LookupTCP = %+v, want %+v", round, got, want)
				}
			}
		})
	}
	t.Run("server side too", func(t *testing.T) {
		c := loopbackConn(t, "127.0.0.1:0")
		local, remote := tuple(c)
		got, err := f.LookupTCP(remote, local) // the accepted socket's view
		if err != nil || got.PID != want.PID {
			t.Errorf("LookupTCP(server side) = %+v, %v; want pid %d", got, err, want.PID)
		}
	})
	t.Run("dual-stack socket with an ipv4 peer", func(t *testing.T) {
		// The accepted side of a [::] listener is an AF_INET6 socket carrying IPv4.
		ln, err := net.Listen("tcp", "[::]:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		c, err := net.Dial("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		local, remote := tuple(s) // the accepted socket's own view
		if !remote.Addr().Is4In6() {
			t.Fatalf("accepted socket sees peer %v, want an IPv4-mapped address", remote)
		}
		got, err := f.LookupTCP(local, remote)
		if err != nil || got.PID != want.PID {
			t.Errorf("LookupTCP(accepted dual-stack side %v -> %v) = %+v, %v; want pid %d", local, remote, got, err, want.PID)
		}
	})
	t.Run("ipv4-mapped addresses", func(t *testing.T) {
		c := loopbackConn(t, "127.0.0.1:0")
		local, remote := tuple(c)
		m := func(ap netip.AddrPort) netip.AddrPort {
			return netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port())
		}
		if got, err := f.LookupTCP(m(local), m(remote)); err != nil || got.PID != want.PID {
			t.Errorf("LookupTCP(mapped) = %+v, %v; want pid %d", got, err, want.PID)
		}
	})
	t.Run("no such socket", func(t *testing.T) {
		c := loopbackConn(t, "127.0.0.1:0")
		local, _ := tuple(c)
		_, err := f.LookupTCP(local, netip.MustParseAddrPort("127.0.0.1:1"))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("LookupTCP(unknown tuple) = %v, want fs.ErrNotExist", err)
		}
	})
	t.Run("mixed families", func(t *testing.T) {
		_, err := f.LookupTCP(netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("[::1]:2"))
		if err == nil {
			t.Error("LookupTCP(mixed families) succeeded")
		}
	})
	t.Run("stale cache entry is checked", func(t *testing.T) {
		c := loopbackConn(t, "127.0.0.1:0")
		local, remote := tuple(c)
		inode, _, err := diagTCP(local, remote)
		if err != nil {
			t.Fatal(err)
		}
		// Point the cache at a descriptor that is not this socket.
		f.mu.Lock()
		f.cache[inode] = fdRef{pid: int32(os.Getpid()), fd: 0}
		f.mu.Unlock()
		if got, err := f.LookupTCP(local, remote); err != nil || got.PID != want.PID {
			t.Errorf("LookupTCP after a stale entry = %+v, %v; want pid %d", got, err, want.PID)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		f := NewLinuxFinder(LinuxFinderConfig{})
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 8 {
			c := loopbackConn(t, "127.0.0.1:0")
			local, remote := tuple(c)
			wg.Go(func() {
				for range 5 {
					if got, err := f.LookupTCP(local, remote); err != nil || got.PID != want.PID {
						errs <- errors.Join(err, errors.New("wrong pid"))
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func TestCacheBound(t *testing.T) {
	f := NewLinuxFinder(LinuxFinderConfig{MaxCache: 4})
	want := os.Getpid()
	for range 10 {
		c := loopbackConn(t, "127.0.0.1:0")
		local, remote := tuple(c)
		if got, err := f.LookupTCP(local, remote); err != nil || got.PID != want {
			t.Fatalf("LookupTCP = %+v, %v", got, err)
		}
		f.mu.Lock()
		n := len(f.cache)
		f.mu.Unlock()
		if n > 4 {
			t.Fatalf("cache holds %d entries, bound 4", n)
		}
	}
}

func TestTouch(t *testing.T) {
	f := NewLinuxFinder(LinuxFinderConfig{})
	for _, pid := range []int{1, 2, 3, 2, 4, 5, 6, 7, 8, 9, 1} {
		f.touch(pid)
	}
	got, want := f.recent, []int{1, 9, 8, 7, 6, 5, 4, 2}
	if len(got) != len(want) {
		t.Fatalf("recent = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("recent = %v, want %v", got, want)
		}
	}
}

func TestParseSocketLink(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"socket:[12345]", 12345, true},
		{"socket:[0]", 0, true},
		{"socket:[4294967295]", 4294967295, true},
		{"socket:[4294967296]", 0, false},
		{"socket:[]", 0, false},
		{"socket:[12a]", 0, false},
		{"socket:[12", 0, false},
		{"pipe:[12]", 0, false},
		{"/dev/null", 0, false},
		{"", 0, false},
	} {
		got, ok := parseSocketLink([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseSocketLink(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseDiagReply(t *testing.T) {
	msg := func(typ uint16, seq uint32, data []byte) []byte {
		b := make([]byte, 16, 16+len(data)+3)
		putHdr(b, uint32(16+len(data)), typ, seq)
		b = append(b, data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	diag := make([]byte, sizeofInetDiagMsg)
	le32(diag[64:], 1000)
	le32(diag[68:], 4242)
	errMsg := func(errno int32) []byte {
		d := make([]byte, 20)
		le32(d, uint32(-errno))
		return d
	}
	for _, tc := range []struct {
		name       string
		b          []byte
		inode, uid uint32
		err        error // nil: success; fs.ErrNotExist or errAny
	}{
		{"found", msg(20, 1, diag), 4242, 1000, nil},
		{"other seq first", append(msg(20, 7, make([]byte, 72)), msg(20, 1, diag)...), 4242, 1000, nil},
		{"enoent", msg(2, 1, errMsg(2)), 0, 0, fs.ErrNotExist},
		{"eperm", msg(2, 1, errMsg(1)), 0, 0, errAny},
		{"done", msg(3, 1, nil), 0, 0, fs.ErrNotExist},
		{"no inode", msg(20, 1, make([]byte, 72)), 0, 0, fs.ErrNotExist},
		{"short diag", msg(20, 1, make([]byte, 10)), 0, 0, errAny},
		{"bad length", []byte{200, 0, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, 0, 0, errAny},
		{"empty", nil, 0, 0, errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inode, uid, err := parseDiagReply(tc.b, 1)
			switch {
			case tc.err == nil && (err != nil || inode != tc.inode || uid != tc.uid):
				t.Errorf("parseDiagReply = %d, %d, %v; want %d, %d", inode, uid, err, tc.inode, tc.uid)
			case tc.err == fs.ErrNotExist && !errors.Is(err, fs.ErrNotExist):
				t.Errorf("parseDiagReply error = %v, want fs.ErrNotExist", err)
			case tc.err == errAny && err == nil:
				t.Errorf("parseDiagReply = %d, %d, nil; want an error", inode, uid)
			}
		})
	}
}

var errAny = errors.New("any error")

func le32(b []byte, v uint32) { b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }

func putHdr(b []byte, l uint32, typ uint16, seq uint32) {
	le32(b[0:], l)
	b[4], b[5] = byte(typ), byte(typ>>8)
	le32(b[8:], seq)
}

func FuzzParseDiagReply(f *testing.F) {
	f.Add([]byte{})
	f.Add(append([]byte{88, 0, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 72)...))
	f.Add([]byte{36, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		inode, _, err := parseDiagReply(b, 1)
		if err == nil && inode == 0 {
			t.Fatalf("parseDiagReply(%x) succeeded with inode 0", b)
		}
	})
}

func FuzzParseSocketLink(f *testing.F) {
	f.Add([]byte("socket:[12345]"))
	f.Add([]byte("pipe:[1]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		inode, ok := parseSocketLink(b)
		if !ok && inode != 0 {
			t.Fatalf("parseSocketLink(%q) = %d, false", b, inode)
		}
	})
}

// TestLookupTCPOtherProcess attributes a connection to a child process (curl) that holds it
// open: the lookup must find the child's PID, name and path, not ours.
func TestLookupTCPOtherProcess(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("this test needs curl: %v", err)
	}
	curl, _ = filepath.EvalSymlinks(curl)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, curl, "-s", "-m", "8", "http://"+ln.Addr().String()+"/")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	local, remote := tuple(s)
	got, err := NewLinuxFinder(LinuxFinderConfig{}).LookupTCP(remote, local) // curl's socket
	if err != nil {
		t.Fatal(err)
	}
	want := rules.Owner{PID: cmd.Process.Pid, App: filepath.Base(curl), AppPath: curl}
	if got.PID != want.PID || got.App != want.App || got.AppPath != want.AppPath {
		t.Errorf("LookupTCP = %+v, want %+v", got, want)
	}
}
