package guard

import (
	"path"
	"slices"
	"strings"
)

// Machine is what ResolveApps reads of the machine. SystemMachine (Windows) reads the real
// one; tests give a fake.
type Machine interface {
	// RegString returns a string value under HKEY_LOCAL_MACHINE (64-bit view), or an error
	// when the key or value does not exist.
	RegString(key, value string) (string, error)
	// ReadDir returns the names of the files in dir (not subdirectories), or an error.
	ReadDir(dir string) ([]string, error)
	// Exists reports whether the file path exists.
	Exists(path string) bool
	// Getenv returns an environment variable ("ProgramFiles", "ProgramFiles(x86)",
	// "SystemRoot"), or "".
	Getenv(name string) string
}

// hypervisor is where a known hypervisor's traffic-carrying executables live.
type hypervisor struct {
	name     string
	reg      [][2]string // {key, value} of its install directory, first found wins
	defaults []string    // directories tried when the registry names none, %VAR% expanded
	subdirs  []string    // below the install directory
	images   []string    // lower-case file patterns
}

// hypervisors: the images that carry a guest's traffic on the host. VirtualBox's NAT runs
// in VirtualBoxVM.exe (VBoxHeadless.exe headless), its "NAT Network" mode in
// VBoxNetNAT.exe; VMware's NAT is the vmnat.exe service (a 32-bit binary in SysWOW64),
// bridged-less guests also reach out from vmware-vmx.exe; QEMU's user networking runs in
// qemu-system-*.exe.
var hypervisors = []hypervisor{
	{
		name:     "virtualbox",
		reg:      [][2]string{{`SOFTWARE\Oracle\VirtualBox`, "InstallDir"}},
		defaults: []string{`%ProgramFiles%\Oracle\VirtualBox`},
		subdirs:  []string{""},
		images:   []string{"virtualboxvm.exe", "vboxheadless.exe", "vboxnetnat.exe"},
	},
	{
		name: "vmware",
		reg: [][2]string{
			{`SOFTWARE\WOW6432Node\VMware, Inc.\VMware Workstation`, "InstallPath"},
			{`SOFTWARE\VMware, Inc.\VMware Workstation`, "InstallPath"},
			{`SOFTWARE\WOW6432Node\VMware, Inc.\VMware Player`, "InstallPath"},
		},
		defaults: []string{`%ProgramFiles(x86)%\VMware\VMware Workstation`, `%ProgramFiles%\VMware\VMware Workstation`},
		subdirs:  []string{"", "x64"},
		images:   []string{"vmware-vmx.exe", "vmnat.exe"},
	},
	{
		name:     "vmware-nat",
		defaults: []string{`%SystemRoot%\SysWOW64`, `%SystemRoot%\System32`},
		subdirs:  []string{""},
		images:   []string{"vmnat.exe"},
	},
	{
		name:     "qemu",
		reg:      [][2]string{{`SOFTWARE\QEMU`, "Install_Dir"}},
		defaults: []string{`%ProgramFiles%\qemu`},
		subdirs:  []string{""},
		images:   []string{"qemu-system-*.exe"},
	},
}

// SystemImage reports whether path is an executable of Windows itself: it lies in the
// Windows directory root (%SystemRoot%; "" is C:\Windows) and is no known hypervisor's
// image (VMware's vmnat.exe is installed in SysWOW64). Such an image is never guarded by
// path: one is often shared by many services (svchost.exe hosts DHCP, DNS, Windows Update
// and time sync), and blocking it while the router is stopped would cut the host off. A
// service is caged by its service SID instead (a rule's services).
func SystemImage(root, path string) bool {
	if root == "" {
		root = `C:\Windows`
	}
	dir := strings.ToLower(strings.TrimRight(strings.ReplaceAll(root, "/", `\`), `\`)) + `\`
	p := strings.ToLower(strings.ReplaceAll(path, "/", `\`))
	if !strings.HasPrefix(p, dir) {
		return false
	}
	name := p[strings.LastIndexByte(p, '\\')+1:]
	for _, h := range hypervisors {
		if matchAny(h.images, name) {
			return false
		}
	}
	return true
}

// Apps is the result of ResolveApps.
type Apps struct {
	// Paths are the caged executables found, absolute, each once, sorted.
	Paths []string
	// Unresolved are the names of the config that matched no file: the capture still
	// cages them by name, but the guard cannot name them (give their full path).
	Unresolved []string
}

// ResolveApps returns the caged executables on m: every image of a known hypervisor found
// in its install directories (from the registry, else the default ones), and each name of
// names (the apps of the config's proxy and block rules): an absolute path is taken as it
// is when the file exists; a file name or pattern (case-insensitive, * and ? as in the
// config, ".exe" optional) is looked up in the hypervisors' directories.
func ResolveApps(m Machine, names []string) Apps {
	type dirFiles struct {
		dir   string
		files []string
	}
	var dirs []dirFiles
	seenDir := map[string]bool{}
	var found []string
	for _, h := range hypervisors {
		for _, base := range installDirs(m, h) {
			for _, sub := range h.subdirs {
				dir := joinWin(base, sub)
				if seenDir[strings.ToLower(dir)] {
					continue
				}
				files, err := m.ReadDir(dir)
				if err != nil {
					continue
				}
				seenDir[strings.ToLower(dir)] = true
				dirs = append(dirs, dirFiles{dir, files})
				for _, f := range files {
					if matchAny(h.images, f) {
						found = append(found, joinWin(dir, f))
					}
				}
			}
		}
	}
	var out Apps
	for _, n := range names {
		if isAbsWindows(n) {
			if m.Exists(n) {
				found = append(found, n)
			} else {
				out.Unresolved = append(out.Unresolved, n)
			}
			continue
		}
		pat := strings.ToLower(n)
		hit := false
		for _, d := range dirs {
			for _, f := range d.files {
				if nameMatch(pat, strings.ToLower(f)) {
					found = append(found, joinWin(d.dir, f))
					hit = true
				}
			}
		}
		if !hit {
			out.Unresolved = append(out.Unresolved, n)
		}
	}
	seen := map[string]bool{}
	for _, p := range found {
		if k := strings.ToLower(p); !seen[k] {
			seen[k] = true
			out.Paths = append(out.Paths, p)
		}
	}
	slices.SortFunc(out.Paths, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	return out
}

// installDirs returns h's install directories: the first the registry names, else the
// defaults.
func installDirs(m Machine, h hypervisor) []string {
	for _, r := range h.reg {
		if d, err := m.RegString(r[0], r[1]); err == nil && isAbsWindows(d) {
			return []string{strings.TrimRight(d, `\/`)}
		}
	}
	var out []string
	for _, d := range h.defaults {
		if e := expand(m, d); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// expand replaces a leading %VAR% with its value; "" when it is unset.
func expand(m Machine, s string) string {
	if !strings.HasPrefix(s, "%") {
		return s
	}
	end := strings.Index(s[1:], "%")
	if end < 0 {
		return s
	}
	v := m.Getenv(s[1 : end+1])
	if v == "" {
		return ""
	}
	return strings.TrimRight(v, `\/`) + s[end+2:]
}

func joinWin(dir, name string) string {
	if name == "" {
		return dir
	}
	return strings.TrimRight(dir, `\/`) + `\` + name
}

func matchAny(pats []string, name string) bool {
	l := strings.ToLower(name)
	for _, p := range pats {
		if ok, _ := path.Match(p, l); ok {
			return true
		}
	}
	return false
}

// nameMatch matches a lower-case config pattern against a lower-case file name; a pattern
// without ".exe" also matches the name with it.
func nameMatch(pat, name string) bool {
	if ok, _ := path.Match(pat, name); ok {
		return true
	}
	if !strings.HasSuffix(pat, ".exe") {
		ok, _ := path.Match(pat+".exe", name)
		return ok
	}
	return false
}
