package guard

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// fakeMachine is a Machine made of maps; keys are compared case-insensitively.
type fakeMachine struct {
	reg  map[string]string   // `key|value` -> data
	dirs map[string][]string // dir -> file names
	env  map[string]string
}

func (m fakeMachine) RegString(key, value string) (string, error) {
	if v, ok := m.reg[strings.ToLower(key+"|"+value)]; ok {
		return v, nil
	}
	return "", fs.ErrNotExist
}

func (m fakeMachine) ReadDir(dir string) ([]string, error) {
	if fs, ok := m.dirs[strings.ToLower(dir)]; ok {
		return fs, nil
	}
	return nil, fs.ErrNotExist
}

func (m fakeMachine) Exists(path string) bool {
	i := strings.LastIndex(path, `\`)
	files, err := m.ReadDir(path[:i])
	return err == nil && slices.ContainsFunc(files, func(f string) bool { return strings.EqualFold(f, path[i+1:]) })
}

func (m fakeMachine) Getenv(name string) string { return m.env[name] }

func TestResolveApps(t *testing.T) {
	m := fakeMachine{
		reg: map[string]string{
			strings.ToLower(`SOFTWARE\Oracle\VirtualBox|InstallDir`):                            `D:\Apps\VirtualBox\`,
			strings.ToLower(`SOFTWARE\WOW6432Node\VMware, Inc.\VMware Workstation|InstallPath`): `C:\Program Files (x86)\VMware\VMware Workstation\`,
		},
		dirs: map[string][]string{
			strings.ToLower(`D:\Apps\VirtualBox`):                                   {"VirtualBox.exe", "VirtualBoxVM.exe", "VBoxHeadless.exe", "VBoxNetNAT.exe", "VBoxSVC.exe"},
			strings.ToLower(`C:\Program Files (x86)\VMware\VMware Workstation`):     {"vmware.exe", "vmnat.exe"},
			strings.ToLower(`C:\Program Files (x86)\VMware\VMware Workstation\x64`): {"vmware-vmx.exe"},
			strings.ToLower(`C:\Windows\SysWOW64`):                                  {"vmnat.exe", "notepad.exe"},
			strings.ToLower(`C:\Program Files\qemu`):                                {"qemu-system-x86_64.exe", "qemu-system-aarch64.exe", "qemu-img.exe"},
			strings.ToLower(`C:\Tools`):                                             {"agent.exe"},
		},
		env: map[string]string{"ProgramFiles": `C:\Program Files`, "ProgramFiles(x86)": `C:\Program Files (x86)`, "SystemRoot": `C:\Windows`},
	}
	got := ResolveApps(m, []string{"virtualboxvm.exe", "VBoxSVC", `C:\Tools\agent.exe`, `C:\Tools\gone.exe`, "curl.exe", "qemu-system-*"})
	want := []string{
		`C:\Program Files (x86)\VMware\VMware Workstation\vmnat.exe`,
		`C:\Program Files (x86)\VMware\VMware Workstation\x64\vmware-vmx.exe`,
		`C:\Program Files\qemu\qemu-system-aarch64.exe`,
		`C:\Program Files\qemu\qemu-system-x86_64.exe`,
		`C:\Tools\agent.exe`,
		`C:\Windows\SysWOW64\vmnat.exe`,
		`D:\Apps\VirtualBox\VBoxHeadless.exe`,
		`D:\Apps\VirtualBox\VBoxNetNAT.exe`,
		`D:\Apps\VirtualBox\VBoxSVC.exe`,
		`D:\Apps\VirtualBox\VirtualBoxVM.exe`,
	}
	if !slices.Equal(got.Paths, want) {
		t.Errorf("paths:\n%s\nwant\n%s", strings.Join(got.Paths, "\n"), strings.Join(want, "\n"))
	}
	if u := []string{`C:\Tools\gone.exe`, "curl.exe"}; !slices.Equal(got.Unresolved, u) {
		t.Errorf("unresolved %q, want %q", got.Unresolved, u)
	}
	// Nothing installed: nothing found, nothing fails.
	if got := ResolveApps(fakeMachine{}, nil); len(got.Paths) != 0 || len(got.Unresolved) != 0 {
		t.Errorf("empty machine: %+v", got)
	}
}
