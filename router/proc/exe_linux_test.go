package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAttributedByExecutable: a process is known by the executable it runs, not by the
// name it was started as or gives itself: one started through a link named like a
// hypervisor is attributed to its executable (Name, Path) and its flows carry no command
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
	if info.Name != filepath.Base(real) || info.Path != real || info.Comm != "" || info.PID != pid {
		t.Errorf("lookup: %+v, want name %q, path %q, no command name", info, filepath.Base(real), real)
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
	case got.Name != filepath.Base(real) || got.Path != real || got.Comm != "qemu-system-x86" || got.PPID != os.Getpid():
		t.Errorf("listed: %+v, want name %q, path %q, comm qemu-system-x86, parent %d", *got, filepath.Base(real), real, os.Getpid())
	}
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
