package cagemark

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/roottest"
)

// The test binary doubles as the helper the process tests run under names of their choice:
// with helperEnv set it does what the variable says instead of running the tests.
const (
	helperEnv = "ROUTER_CAGEMARK_HELPER" // the mode, see helper
	netnsEnv  = "ROUTER_CAGEMARK_NETNS"  // the namespace file the helper's socket is made in
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// helper runs one mode and prints "mark=M comm=C" for the socket it (or its child) made:
//
//	plain           a socket from a thread of its own
//	thread:NAME     the thread names itself NAME (prctl PR_SET_NAME), then makes the socket
//	proc:NAME       the process renames its main thread (/proc/self/comm) and the thread NAME
//	child:EXE:MODE  runs EXE (fork and exec) in MODE and prints what it prints
//	exec:EXE:MODE   makes a socket, then executes EXE in its place in MODE
func helper(mode string) int {
	if rest, ok := strings.CutPrefix(mode, "exec:"); ok {
		exe, sub, _ := strings.Cut(rest, ":")
		if code := helper("quiet"); code != 0 {
			return code
		}
		// Exec takes the first of duplicate variables: the mode is replaced, not added.
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, helperEnv+"=") {
				env = append(env, kv)
			}
		}
		err := syscall.Exec(exe, []string{exe}, append(env, helperEnv+"="+sub))
		fmt.Fprintln(os.Stderr, "exec:", err)
		return 1
	}
	if rest, ok := strings.CutPrefix(mode, "child:"); ok {
		exe, sub, _ := strings.Cut(rest, ":")
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), helperEnv+"="+sub)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		return 0
	}
	kind, name, _ := strings.Cut(mode, ":")
	if kind == "proc" {
		if err := os.WriteFile("/proc/self/comm", []byte(name), 0); err != nil {
			fmt.Fprintln(os.Stderr, "rename the process:", err)
			return 1
		}
	}
	type res struct {
		out string
		err error
	}
	ch := make(chan res)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		if kind == "thread" || kind == "proc" {
			if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&append([]byte(name), 0)[0])), 0, 0, 0); err != nil {
				ch <- res{err: fmt.Errorf("prctl: %w", err)}
				return
			}
		}
		ns, err := unix.Open(os.Getenv(netnsEnv), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer unix.Close(ns)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			ch <- res{err: fmt.Errorf("setns: %w", err)}
			return
		}
		m, err := socketMark(unix.AF_INET)
		if err != nil {
			ch <- res{err: err}
			return
		}
		comm, err := os.ReadFile("/proc/thread-self/comm")
		ch <- res{fmt.Sprintf("mark=%d comm=%s", m, bytes.TrimSpace(comm)), err}
	}()
	r := <-ch
	if r.err != nil {
		fmt.Fprintln(os.Stderr, r.err)
		return 1
	}
	if kind != "quiet" {
		fmt.Println(r.out)
	}
	return 0
}

// copyExe copies the test binary to dir/name.
func copyExe(t *testing.T, dir, name string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p := filepath.Join(dir, name)
	out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMarksByExecutable: the cage knows a process by the executable it runs and by its
// caged ancestors, never by a name the process sets: a caged binary connecting from a
// thread it named NAT (VirtualBox's NAT thread), one renamed (QEMU's -name process=), one
// started through a link of another name, and every child of a caged process, whatever it
// runs, are marked; an uncaged binary renamed, or started through a link, to a caged name is
// not.
func TestMarksByExecutable(t *testing.T) {
	roottest.Require(t, "ip")
	name, fd := testNetNS(t, "cagexe")

	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	caged := copyExe(t, dir, "cagehv")
	plain := copyExe(t, dir, "plainbin")
	if err := os.Mkdir(filepath.Join(dir, "l"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{"VM": caged, "l/cagehv": plain} {
		if err := os.Symlink(to, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	// A name longer than comm's 15 bytes is told whole.
	long := copyExe(t, dir, "cagehv-system-x86_64")
	longer := copyExe(t, dir, "cagehv-system-x86_64-not")

	const mark = 0x52434158
	if err := Install(Config{Names: []string{"cagehv", "cagehv-system-x86_64"}, Mark: mark, NetNS: fd}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what, exe, mode string
		marked          bool
		comm            string // the name the socket's thread had, when the case sets one
	}{
		{"a caged binary", caged, "plain", true, "cagehv"},
		{"a caged binary's thread named NAT", caged, "thread:NAT", true, "NAT"},
		{"a caged binary renamed VM", caged, "proc:VM", true, "VM"},
		{"a caged binary started through a link named VM", filepath.Join(dir, "VM"), "plain", true, "VM"},
		{"a caged binary's child of the same binary, its thread named NAT", caged, "child:" + caged + ":thread:NAT", true, "NAT"},
		{"a caged binary's child running an uncaged binary", caged, "child:" + plain + ":plain", true, "plainbin"},
		{"a caged binary's child through a link named VM", caged, "child:" + filepath.Join(dir, "VM") + ":plain", true, "VM"},
		{"a caged name longer than comm", long, "plain", true, "cagehv-system-x"},
		{"a caged binary that made a socket, then executed an uncaged one in its place", caged, "exec:" + plain + ":plain", true, "plainbin"},
		{"its child", caged, "exec:" + plain + ":child:" + plain + ":thread:NAT", true, "NAT"},
		{"an uncaged binary", plain, "plain", false, "plainbin"},
		{"an uncaged binary renamed to a caged name", plain, "proc:cagehv", false, "cagehv"},
		{"an uncaged binary's thread named as a caged one", plain, "thread:cagehv", false, "cagehv"},
		{"an uncaged binary started through a link of a caged name", filepath.Join(dir, "l", "cagehv"), "plain", false, "cagehv"},
		{"an uncaged binary whose name a caged one's prefixes", longer, "plain", false, "cagehv-system-x"},
	} {
		cmd := exec.Command(tc.exe)
		cmd.Env = append(os.Environ(), helperEnv+"="+tc.mode, netnsEnv+"=/run/netns/"+name)
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("%s: %v: %s", tc.what, err, out)
			continue
		}
		var m uint32
		var comm string
		if _, err := fmt.Sscanf(string(out), "mark=%d comm=%s", &m, &comm); err != nil {
			t.Errorf("%s: output %q: %v", tc.what, out, err)
			continue
		}
		if comm != tc.comm {
			t.Errorf("%s: the socket's thread was named %q, want %q (the case did not set up)", tc.what, comm, tc.comm)
		}
		want := uint32(0)
		if tc.marked {
			want = mark
		}
		if m != want {
			t.Errorf("%s (%s, %s): mark %#x, want %#x", tc.what, filepath.Base(tc.exe), tc.mode, m, want)
		}
		// The program remembers the process that made the socket, when it caged it.
		if !strings.Contains(tc.mode, "child:") {
			once, err := Once(fd)
			if err != nil {
				t.Fatal(err)
			}
			if once[cmd.Process.Pid] != tc.marked {
				t.Errorf("%s: remembered %v, want %v", tc.what, once[cmd.Process.Pid], tc.marked)
			}
		}
	}
}

// TestKernelLayout: the running kernel's BTF gives every offset the program reads, each
// inside its structure, and a member missing is an error naming it.
func TestKernelLayout(t *testing.T) {
	l, err := kernelLayout(nil)
	if err != nil {
		t.Fatal(err)
	}
	for what, off := range map[string]int16{"task_struct.mm": l.taskMM, "task_struct.real_parent": l.taskParent,
		"mm_struct.exe_file": l.mmExe, "file.f_path.dentry": l.fileDentry, "dentry.d_name.name": l.dentryName} {
		if off <= 0 || off%8 != 0 {
			t.Errorf("%s at %d: want a positive pointer-aligned offset", what, off)
		}
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := offsetOf(spec, "task_struct", "no_such_member"); err == nil || !strings.Contains(err.Error(), "no_such_member") {
		t.Errorf("a missing member: %v", err)
	}
}

// BenchmarkSocketCreate measures a socket's creation and close in a namespace with the
// programs attached for it, the caller of no caged line (the program walks its line to
// init), against BenchmarkSocketCreateBare's without.
func BenchmarkSocketCreate(b *testing.B) { benchSocket(b, true) }

func BenchmarkSocketCreateBare(b *testing.B) { benchSocket(b, false) }

func benchSocket(b *testing.B, install bool) {
	roottest.Require(b, "ip")
	_, fd := testNetNS(b, "cagebench")
	if install {
		if err := Install(Config{Names: []string{"qemu-system-*", "VBoxHeadless", "passt.avx2"}, Mark: 7, NetNS: fd}); err != nil {
			b.Fatal(err)
		}
		stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			b.Fatal(err)
		}
		defer stats.Close()
		defer reportRunTime(b, fd)
	}
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(s)
	}
	b.StopTimer()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		b.Fatal(err) // the thread stays locked and goes with the goroutine
	}
	unix.Close(orig)
	runtime.UnlockOSThread()
}

// TestReplacesOlderPrograms: programs an older version attached for the namespace (its
// names map keyed by comm's 16 bytes) are not taken for this version's: Installed says
// none, and Install detaches them and attaches its own.
func TestReplacesOlderPrograms(t *testing.T) {
	roottest.Require(t, "ip")
	_, fd := testNetNS(t, "cageold")
	l, err := kernelLayout(nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := lookup(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer before.close()
	old := &prog{}
	defer old.close()
	if old.config, err = ebpf.NewMap(&ebpf.MapSpec{Name: configName, Type: ebpf.Array, KeySize: 4, ValueSize: configSize, MaxEntries: 1}); err != nil {
		t.Fatal(err)
	}
	if old.names, err = ebpf.NewMap(&ebpf.MapSpec{Name: namesName, Type: ebpf.LPMTrie, KeySize: 4 + 16, ValueSize: 1,
		MaxEntries: maxNames, Flags: unix.BPF_F_NO_PREALLOC}); err != nil {
		t.Fatal(err)
	}
	if old.procs, err = ebpf.NewMap(&ebpf.MapSpec{Name: "old_procs", Type: ebpf.Hash, KeySize: 16, ValueSize: 1, MaxEntries: 1}); err != nil {
		t.Fatal(err)
	}
	if err := old.config.Put(uint32(0), config(before.cookie, 0x52434147)); err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		if err := attach(before.cg, h, l, old); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok, err := Installed(fd); err != nil || ok {
		t.Errorf("Installed with an older version's programs: %v %v, want false", ok, err)
	}
	if err := Install(Config{Names: []string{"cagehv"}, Mark: 0x52434147, NetNS: fd}); err != nil {
		t.Fatal(err)
	}
	after, err := lookup(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer after.close()
	if len(after.progs) != len(hooks) {
		t.Errorf("%d programs for the namespace after Install, want %d", len(after.progs), len(hooks))
	}
	for _, p := range after.progs {
		if p.stale {
			t.Errorf("an older program left on %s", p.hook.name)
		}
	}
	if names, _, ok, err := Installed(fd); err != nil || !ok || len(names) != 1 || names[0] != "cagehv" {
		t.Errorf("Installed: %q %v %v", names, ok, err)
	}
}

// reportRunTime reports the socket-creation program's mean run time (every socket of the
// machine's since it was attached: the others' leave at the namespace's check).
func reportRunTime(b *testing.B, fd int) {
	a, err := lookup(fd)
	if err != nil {
		b.Fatal(err)
	}
	defer a.close()
	for _, p := range a.progs {
		if p.hook.attach != ebpf.AttachCGroupInetSockCreate {
			continue
		}
		st, err := p.prog.Stats()
		if err != nil || st.RunCount == 0 {
			b.Fatalf("program stats: %+v, %v", st, err)
		}
		b.ReportMetric(float64(st.Runtime.Nanoseconds())/float64(st.RunCount), "ns/run")
		b.ReportMetric(float64(st.RunCount)/float64(b.N), "runs/op")
	}
}
