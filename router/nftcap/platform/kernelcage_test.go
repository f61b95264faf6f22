package platform

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/rules"
)

// fakeCage is a cageReader over a fixed process table and the names a kernel program holds.
type fakeCage struct {
	procs     []proc.Info
	names     []string
	installed bool
	netNS     uint64
	once      map[int]bool
	err       error
}

func (f fakeCage) Processes() ([]proc.Info, error) { return f.procs, nil }
func (f fakeCage) KernelCage() (KernelCage, error) {
	return KernelCage{Names: f.names, Once: f.once, Installed: f.installed, NetNS: f.netNS}, f.err
}

// TestKernelCaged: status shows the processes the kernel cages as its program decides (by
// the executable a process or an ancestor runs, whatever it calls itself) and warns of a
// known hypervisor binary it does not cage, under any name: RHEL's qemu-kvm under a preset
// that did not name it, one caged by path only (the kernel cannot tell paths), every one
// when no program is attached. A binary that only calls itself a hypervisor is neither, nor
// is a process of another network namespace.
func TestKernelCaged(t *testing.T) {
	procs := []proc.Info{
		{Owner: rules.Owner{PID: 1, App: "systemd", AppPath: "/usr/lib/systemd/systemd"}},
		{Owner: rules.Owner{PID: 100, App: "qemu-system-x86_64", AppPath: "/usr/bin/qemu-system-x86_64"}, Comm: "VM", PPID: 1},
		{Owner: rules.Owner{PID: 101, App: "qemu-kvm", AppPath: "/usr/libexec/qemu-kvm"}, PPID: 1},
		{Owner: rules.Owner{PID: 102, App: "sh", AppPath: "/usr/bin/sh"}, PPID: 100},
		{Owner: rules.Owner{PID: 103, App: "VBoxHeadless", AppPath: "/usr/lib/virtualbox/VBoxHeadless"}, PPID: 1},
		{Owner: rules.Owner{PID: 104, App: "plainbin", AppPath: "/tmp/plainbin"}, Comm: "qemu-system-x86", PPID: 1},
		{Owner: rules.Owner{PID: 105, App: "kthreadd"}},                                                      // no executable: the kernel knows no name
		{Owner: rules.Owner{PID: 106, App: "qemu-kvm", AppPath: "/usr/libexec/qemu-kvm"}, PPID: 1, NetNS: 9}, // another namespace's
		{Owner: rules.Owner{PID: 107, App: "sh", AppPath: "/usr/bin/sh"}, PPID: 1},                           // caged once, then executed sh
		{Owner: rules.Owner{PID: 108, App: "curl", AppPath: "/usr/bin/curl"}, PPID: 107},                     // its child
	}
	for i := range procs {
		if procs[i].NetNS == 0 {
			procs[i].NetNS = 7
		}
	}
	caged, warns := kernelCaged(fakeCage{procs: procs, names: []string{"qemu-system-*", "VBoxHeadless", "/usr/libexec/qemu-kvm"}, installed: true, netNS: 7, once: map[int]bool{107: true}}, "linux")
	want := []control.KernelCagedStat{
		{PID: 100, Exe: "qemu-system-x86_64", Comm: "VM"},
		{PID: 102, Exe: "sh", By: "qemu-system-x86_64", ByPID: 100},
		{PID: 103, Exe: "VBoxHeadless"},
		{PID: 107, Exe: "sh"},
		{PID: 108, Exe: "curl", By: "sh", ByPID: 107},
	}
	if !slices.Equal(caged, want) {
		t.Errorf("caged %+v, want %+v", caged, want)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "qemu-kvm (pid 101)") || !strings.Contains(warns[0], "uncaged") {
		t.Errorf("warnings %q, want one of qemu-kvm (pid 101)", warns)
	}

	// No program attached: every hypervisor process runs uncaged, whatever it calls itself.
	caged, warns = kernelCaged(fakeCage{procs: procs, netNS: 7}, "linux")
	if len(caged) != 0 {
		t.Errorf("no program: caged %+v", caged)
	}
	var pids []string
	for _, w := range warns {
		pids = append(pids, regexp.MustCompile(`pid \d+`).FindString(w))
	}
	if want := []string{"pid 100", "pid 101", "pid 103"}; !slices.Equal(pids, want) {
		t.Errorf("no program: warnings of %q, want %q: %q", pids, want, warns)
	}
	if !strings.Contains(warns[0], "qemu-system-x86_64 (pid 100) is a hypervisor's user-space NAT and runs uncaged (named VM)") {
		t.Errorf("the warning does not say the name it goes by: %q", warns[0])
	}

	// The kernel cannot be read: one warning saying so.
	_, warns = kernelCaged(fakeCage{procs: procs, err: errors.New("permission denied")}, "linux")
	if len(warns) != 1 || !strings.Contains(warns[0], "permission denied") {
		t.Errorf("unreadable: %q", warns)
	}
}
