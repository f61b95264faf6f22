//go:build !windows

package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// DefaultPath is where the daemon listens unless [control] socket says otherwise.
const DefaultPath = "/run/router/control.sock"

// Listen opens the control socket at path so that only its owner (root) can connect, from
// the moment anybody could reach it: the socket's mode is 0600 before it appears at path.
//
//   - A directory that does not exist is created with mode 0700 (and its parents).
//   - An existing directory is never changed: it may be shared, like /tmp. When only its
//     owner may enter it (it is ours and gives group and others nothing), the socket is
//     made there. Otherwise the socket is made in a private temporary directory inside it
//     (mode 0700), given mode 0600 and renamed to path.
//   - A stale socket at path (from a crash) is replaced; anything else at path is refused.
//
// Closing the listener removes the socket.
func Listen(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("control: %w", err)
		}
	}
	private, err := privateDir(dir)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control: %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control: remove the stale socket: %w", err)
		}
	}
	if private {
		ln, err := bind(path)
		if err != nil {
			return nil, err
		}
		ln.SetUnlinkOnClose(true)
		return ln, nil
	}
	tmp, err := os.MkdirTemp(dir, ".router-control-")
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	defer os.RemoveAll(tmp)
	ln, err := bind(filepath.Join(tmp, "s"))
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Rename(filepath.Join(tmp, "s"), path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control: %w", err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("control: %w", err)
	}
	return &movedListener{UnixListener: ln, path: path, fi: fi}, nil
}

// privateDir reports whether only this process's user may enter dir: it is a directory
// (not a link to one) owned by the effective user, with no permission for group or others.
func privateDir(dir string) (bool, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return false, err
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("%s is not a directory", dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false, nil
	}
	return int(st.Uid) == os.Geteuid() && fi.Mode().Perm()&0o077 == 0, nil
}

// bind listens on a new unix socket at path and gives it mode 0600.
func bind(path string) (*net.UnixListener, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	ul := ln.(*net.UnixListener)
	if err := os.Chmod(path, 0o600); err != nil {
		ul.Close()
		return nil, fmt.Errorf("control: %w", err)
	}
	return ul, nil
}

// movedListener is a listener whose socket was renamed into place: Close removes the
// socket at path, if it is still this one.
type movedListener struct {
	*net.UnixListener
	path string
	fi   os.FileInfo
	once sync.Once
}

func (l *movedListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.fi) {
			os.Remove(l.path)
		}
	})
	return err
}

func dial(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}
