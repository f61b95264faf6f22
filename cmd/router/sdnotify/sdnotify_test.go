//go:build !windows

// Windows has no datagram Unix sockets (nor systemd).

package sdnotify

import (
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// listen returns a datagram socket at name (a path, or "@abstract") and a function that
// reads one datagram from it.
func listen(t *testing.T, name string) func() string {
	t.Helper()
	addr := name
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return func() string {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 256)
		n, err := c.Read(b)
		if err != nil {
			t.Fatal(err)
		}
		return string(b[:n])
	}
}

func TestNotify(t *testing.T) {
	names := []string{filepath.Join(t.TempDir(), "notify")}
	if runtime.GOOS == "linux" {
		names = append(names, "@router-sdnotify-test-"+filepath.Base(t.TempDir()))
	}
	for _, name := range names {
		read := listen(t, name)
		if err := Notify(name, Ready); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := read(); got != Ready {
			t.Errorf("%s: got %q, want %q", name, got, Ready)
		}
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	if err := Notify("", Ready); err != nil {
		t.Errorf("no socket: %v, want nil", err)
	}
	if err := Notify(filepath.Join(t.TempDir(), "absent"), Ready); err == nil {
		t.Error("a socket nobody listens on: nil error")
	}
}
