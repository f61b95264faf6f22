package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Names the lab creates: namespaces and /etc/netns directories "rl<pid>-<4 hex>-<role>",
// temporary directories "rl<pid>-<4 hex>-dante-*" and "rl<pid>-<4 hex>-state-*".
const (
	nsNamePattern  = `^rl([0-9]+)-[0-9a-f]{4}-(inet|host|guest|guest2)$`
	tmpDirPattern  = `^rl([0-9]+)-[0-9a-f]{4}-(dante|state)-`
	etcNetnsDir    = "/etc/netns"
	cleanupTimeout = 10 * time.Second
)

// Cleanup removes what labs of killed processes left behind: every namespace (ending the
// processes still inside it), /etc/netns directory and temporary directory whose name follows
// the lab's pattern and whose owner PID no longer runs. Labs of running processes, this one
// included, are left alone (a stale lab whose PID was reused stays until that process ends).
// logf (nil discards) hears what is removed. New calls Cleanup itself.
func Cleanup(ctx context.Context, logf func(format string, args ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	nsRE := regexp.MustCompile(nsNamePattern)
	stale := func(re *regexp.Regexp, name string) bool {
		m := re.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, err := strconv.Atoi(m[1])
		return err == nil && pid != os.Getpid() && !running(pid)
	}
	var errs []error
	for _, name := range dirNames(netnsRunDir) {
		if !stale(nsRE, name) {
			continue
		}
		logf("lab cleanup: removing stale namespace %s", name)
		if err := endProcessesIn(ctx, name, logf); err != nil {
			errs = append(errs, err)
		}
		if _, err := runCmd(ctx, cleanupTimeout, "", "ip", "netns", "del", name); err != nil {
			errs = append(errs, fmt.Errorf("delete stale namespace: %w", err))
		}
	}
	for _, name := range dirNames(etcNetnsDir) {
		if stale(nsRE, name) {
			if err := os.RemoveAll(filepath.Join(etcNetnsDir, name)); err != nil {
				errs = append(errs, fmt.Errorf("remove stale resolver directory: %w", err))
			}
		}
	}
	tmpRE := regexp.MustCompile(tmpDirPattern)
	for _, name := range dirNames(os.TempDir()) {
		if stale(tmpRE, name) {
			if err := os.RemoveAll(filepath.Join(os.TempDir(), name)); err != nil {
				errs = append(errs, fmt.Errorf("remove stale temporary directory: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

func dirNames(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// nsPIDs lists the processes whose network namespace is the named one (this process never).
func nsPIDs(ctx context.Context, name string) ([]int, error) {
	out, err := runCmd(ctx, cleanupTimeout, "", "ip", "netns", "pids", name)
	if err != nil {
		return nil, fmt.Errorf("list processes in namespace: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// endProcessesIn kills (SIGKILL, by PID) every process left in the named namespace and waits
// up to 2 s for them to go.
func endProcessesIn(ctx context.Context, name string, logf func(string, ...any)) error {
	pids, err := nsPIDs(ctx, name)
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		return nil
	}
	logf("lab: ending processes left in %s: %v", name, pids)
	for _, pid := range pids {
		_ = kill(pid)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		var alive []int
		for _, pid := range pids {
			if running(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v in namespace %s survive SIGKILL", alive, name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// running reports whether pid is a live process (not a zombie), from /proc.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may contain any byte.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}
