package cagemark

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/agentcage/router/internal/roottest"
	"github.com/agentcage/router/internal/wait"
)

// TestMarksRenamedQEMU: a real QEMU started as quickemu starts it, -name VM,process=VM
// (its command name becomes VM), is caged by the qemu preset's names: the monitor socket it
// opens at its start carries the mark.
func TestMarksRenamedQEMU(t *testing.T) {
	roottest.Require(t, "ip", "ss", "qemu-system-x86_64")
	name, fd := testNetNS(t, "cageqemu")
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	const mark = 0x52434151
	if err := Install(Config{Names: []string{"qemu-system-*", "qemu-kvm"}, Mark: mark, NetNS: fd}); err != nil {
		t.Fatal(err)
	}
	const port = 4555
	cmd := exec.Command("ip", "netns", "exec", name, "qemu-system-x86_64", "-name", "VM,process=VM",
		"-machine", "none", "-nodefaults", "-display", "none", "-monitor", fmt.Sprintf("tcp:127.0.0.1:%d,server,nowait", port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() // by PID: ip netns exec executed QEMU in its place
		cmd.Wait()
	})
	pid := strconv.Itoa(cmd.Process.Pid)
	// Wait for QEMU's listening socket, at most 10 s.
	sock := regexp.MustCompile(`users:\(\("([^"]*)",pid=` + pid + `,.*?(fwmark:0x([0-9a-f]+))?\s+cgroup`)
	var line []string
	if !wait.Poll(10*time.Second, func() bool { // a state no event tells
		out, err := exec.Command("ip", "netns", "exec", name, "ss", "-tlnpeH", fmt.Sprintf("sport = :%d", port)).Output()
		if err != nil {
			t.Fatalf("ss: %v", err)
		}
		line = sock.FindStringSubmatch(string(out))
		return line != nil
	}) {
		t.Fatalf("QEMU (pid %s) opened no monitor socket in 10 s", pid)
	}
	if line[1] != "VM" {
		t.Errorf("QEMU's socket is held by %q, want the name it set, VM (the case did not set up)", line[1])
	}
	if got, _ := strconv.ParseUint(line[3], 16, 32); got != mark {
		t.Errorf("QEMU renamed VM: its socket's mark %#x, want %#x", got, mark)
	}
}
