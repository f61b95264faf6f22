//go:build !windows

package control

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestListenServeDial(t *testing.T) {
	path := t.TempDir() + "/run/control.sock"
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, fakeHandler{}, nil) }()
	c, err := Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Do(Request{Op: "status"}); err != nil || r.Status.Config != "router.toml" {
		t.Fatalf("status: %+v, %v", r, err)
	}
	c.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSocketIsPrivate: only the socket's owner (root) may enter its directory.
func TestSocketIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for p, want := range map[string]os.FileMode{filepath.Dir(path): 0o700, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", p, got, want)
		}
	}
	// A stale socket from a crash is replaced.
	ln.Close()
	ln2, err := Listen(path)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	ln2.Close()
}

// TestSharedDirectoryKeepsItsMode: a socket path in an existing directory that others may
// enter (a sticky world-writable one like /tmp, or a 0755 one like /run) leaves that
// directory's mode alone, and the socket is 0600 from the moment it appears.
func TestSharedDirectoryKeepsItsMode(t *testing.T) {
	for _, mode := range []os.FileMode{0o777 | os.ModeSticky, 0o755, 0o750} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "shared")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "control.sock")
			ln, err := Listen(path)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go Serve(ctx, ln, fakeHandler{}, nil)
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() & (os.ModePerm | os.ModeSticky); got != mode {
				t.Errorf("directory mode %v after Listen, want %v (unchanged)", got, mode)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
				t.Errorf("socket: %v, %v; want a socket with mode 0600", fi.Mode(), err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries, want the socket alone (the temporary directory removed)", len(entries))
			}
			c, err := Dial(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			if r, err := c.Do(Request{Op: "status"}); err != nil || r.Status.Config != "router.toml" {
				t.Errorf("status: %+v, %v", r, err)
			}
			c.Close()
			ln.Close()
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Errorf("socket still there after Close: %v", err)
			}
			// Listening again over a stale socket works the same way.
			ln, err = Listen(path)
			if err != nil {
				t.Fatal(err)
			}
			ln.Close()
		})
	}
}

// TestListenRefusesAFileInTheWay: a path that holds something other than a socket is left
// alone.
func TestListenRefusesAFileInTheWay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.sock")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ln, err := Listen(path); err == nil {
		ln.Close()
		t.Fatal("Listen replaced a regular file")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "data" {
		t.Errorf("the file changed: %q, %v", b, err)
	}
}
