package cagemark

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// collectGone detaches the programs of this package from the cgroup cg whose network
// namespace no longer exists: a router that was killed in a namespace deleted since left
// them, and the cgroup holds at most 64 programs a hook. A namespace lives while a task is
// in it, a file names it (ip netns's /run/netns) or a descriptor holds it; every such one is
// found under /proc and /run/netns but those of tasks this process may not inspect, and on
// any other failure nothing is detached.
func collectGone(cg int) error {
	// The programs first, then the namespaces: a program attached after the list is not a
	// candidate, and one listed serves a namespace that existed when it was attached, which
	// the walk finds unless it has gone since.
	ours, err := attachedIf(cg, func(uint64) bool { return true })
	if err != nil {
		return fmt.Errorf("programs of namespaces that are gone: %w", err)
	}
	defer ours.close()
	live, err := liveCookies()
	if err != nil {
		return fmt.Errorf("programs of namespaces that are gone: %w", err)
	}
	for _, p := range ours {
		if live[p.cookie] {
			continue
		}
		if err := detach(cg, p); err != nil {
			return fmt.Errorf("programs of namespaces that are gone: %w", err)
		}
	}
	return nil
}

// liveCookies returns the cookies of every network namespace of the machine: those tasks
// are in, those bind-mounted under /run/netns, those a descriptor holds.
func liveCookies() (map[uint64]bool, error) {
	var paths []string
	for _, dir := range []string{"/run/netns", "/var/run/netns"} {
		names, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, n := range names {
			paths = append(paths, filepath.Join(dir, n.Name()))
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		return nil, fmt.Errorf("nsfs: %w", err)
	}
	nsfs := self.Dev
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		dir := filepath.Join("/proc", p.Name())
		tasks, _ := os.ReadDir(filepath.Join(dir, "task")) // a process that ended meanwhile has none
		for _, t := range tasks {
			paths = append(paths, filepath.Join(dir, "task", t.Name(), "ns", "net"))
		}
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, f := range fds {
			// A namespace's file, whatever path it was opened by (a deleted /run/netns
			// entry's descriptor reads as that path): a file of nsfs, which stat tells
			// without opening what the descriptor holds.
			link := filepath.Join(dir, "fd", f.Name())
			var st unix.Stat_t
			if unix.Stat(link, &st) == nil && st.Dev == nsfs {
				paths = append(paths, link)
			}
		}
	}
	type id struct{ dev, ino uint64 }
	seen := map[id]bool{}
	live := map[uint64]bool{}
	for _, path := range paths {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			continue // ended meanwhile: its namespace may be gone too, or found by another path
		}
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			// A task root may not inspect (another user namespace's init, a container's
			// guard): not seen. Should its namespace have had a router's programs, that
			// router's guard finds them missing and attaches them again.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("stat %s: %w", path, err)
		}
		if k := (id{st.Dev, st.Ino}); !seen[k] {
			seen[k] = true
			ns, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
			if err != nil {
				unix.Close(fd)
				return nil, fmt.Errorf("%s: namespace type: %w", path, err)
			}
			if ns == unix.CLONE_NEWNET {
				c, err := netnsCookie(fd)
				if err != nil {
					unix.Close(fd)
					return nil, fmt.Errorf("%s: %w", path, err)
				}
				live[c] = true
			}
		}
		unix.Close(fd)
	}
	return live, nil
}
