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
