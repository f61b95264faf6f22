//go:build windows

package service

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/registry"
	"golang.org/x/sys/windows/svc/eventlog"
	"golang.org/x/sys/windows/svc/mgr"

	"github.com/agentcage/router/windivert/dist"
)

// installOptions configure install; Install fills them for the real service.
type installOptions struct {
	name      string             // the service name
	exe       string             // the router.exe to copy
	config    string             // absolute config path
	dir       string             // the install directory (created if missing)
	winDivert func(string) error // writes the WinDivert files into a directory
	checkDir  func(string) error // refuses a directory others may write (checkAdminOnly)
	env       []string           // NAME=VALUE pairs for the service's environment
}

// InstallDir returns where `router service install` puts router.exe and the WinDivert
// files: %ProgramFiles%\router, found through the known-folder API (not the environment,
// which the user controls).
func InstallDir() (string, error) {
	pf, err := windows.KnownFolderPath(windows.FOLDERID_ProgramFiles, 0)
	if err != nil {
		return "", fmt.Errorf("find the Program Files folder: %w", err)
	}
	return filepath.Join(pf, "router"), nil
}

// Install installs the service so that it runs from a place users cannot write: it copies
// exe (router.exe) and the pinned WinDivert files to InstallDir, gives that directory a
// protected ACL (SYSTEM and Administrators full control, Users read and execute), checks
// that no other account may write there, and creates the service that runs
// `<InstallDir>\router.exe run --config config` as LocalSystem: automatic start, restart on
// failure, SID type unrestricted (so WFP filters can name NT SERVICE\router), and its
// event log source. It refuses, with the reason, when any of that fails (not elevated,
// the service installed already, router.exe in use), and never installs the service at
// exe's own path. Config must be an absolute path (the service starts in System32).
//
// env are NAME=VALUE pairs the service gets in its environment (the service key's
// Environment value, which the service manager reads at each start): a proxy password for
// password_env without a reboot (setx /M reaches services only after one). Local users can
// read a service's key: password_file, in a directory only administrators can read, keeps
// the secret from them.
func Install(exe, config string, env ...string) error {
	dir, err := InstallDir()
	if err != nil {
		return fmt.Errorf("install service: %w", err)
	}
	for _, e := range env {
		if name, _, ok := strings.Cut(e, "="); !ok || name == "" || strings.ContainsAny(name, "\x00") {
			return fmt.Errorf("install service: --env %q: want NAME=VALUE", strings.SplitN(e, "=", 2)[0])
		}
	}
	return install(installOptions{name: Name, exe: exe, config: config, dir: dir, winDivert: dist.Install, checkDir: checkAdminOnly, env: env})
}

func install(o installOptions) error {
	if !filepath.IsAbs(o.config) {
		return fmt.Errorf("install service: config %q must be an absolute path", o.config)
	}
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("install service: connect to the service manager (run from an elevated prompt): %w", err)
	}
	defer m.Disconnect()
	if s, err := m.OpenService(o.name); err == nil {
		s.Close()
		return fmt.Errorf("install service: %q is already installed (uninstall it first)", o.name)
	}
	target, err := placeFiles(o)
	if err != nil {
		return fmt.Errorf("install service: %w", err)
	}
	s, err := m.CreateService(o.name, target, mgr.Config{
		DisplayName:  DisplayName,
		Description:  description,
		StartType:    mgr.StartAutomatic,
		Dependencies: []string{"BFE"},
	}, "run", "--config", o.config)
	if err != nil {
		return fmt.Errorf("install service: %w", err)
	}
	defer s.Close()
	fail := func(what string, err error) error {
		s.Delete()
		return fmt.Errorf("install service: %s: %w", what, err)
	}
	// The guard's hard permits name the service SID, which the service's token carries
	// only with SID type unrestricted. Wine's manager lacks this level
	// (ERROR_INVALID_LEVEL), like the failure actions below; every real Windows has it.
	sidType := uint32(windows.SERVICE_SID_TYPE_UNRESTRICTED)
	if err := windows.ChangeServiceConfig2(s.Handle, windows.SERVICE_CONFIG_SERVICE_SID_INFO, (*byte)(unsafe.Pointer(&sidType))); err != nil && !errors.Is(err, windows.ERROR_INVALID_LEVEL) {
		return fail("service SID type", err)
	}
	recovery := []mgr.RecoveryAction{
		{Type: mgr.ServiceRestart, Delay: time.Second},
		{Type: mgr.ServiceRestart, Delay: 5 * time.Second},
		{Type: mgr.ServiceRestart, Delay: 30 * time.Second},
	}
	// A service manager without failure actions (Wine's answers ERROR_INVALID_LEVEL) gets
	// a service that is not restarted by itself; every real Windows has them.
	if err := s.SetRecoveryActions(recovery, 24*60*60); err != nil && !errors.Is(err, windows.ERROR_INVALID_LEVEL) {
		return fail("recovery actions", err)
	}
	if err := s.SetRecoveryActionsOnNonCrashFailures(true); err != nil && !errors.Is(err, windows.ERROR_INVALID_LEVEL) {
		return fail("recovery actions", err)
	}
	if len(o.env) > 0 {
		k, err := registry.OpenKey(registry.LOCAL_MACHINE, `SYSTEM\CurrentControlSet\Services\`+o.name, registry.SET_VALUE)
		if err != nil {
			return fail("service environment", err)
		}
		err = k.SetStringsValue("Environment", o.env)
		k.Close()
		if err != nil {
			return fail("service environment", err)
		}
	}
	if err := eventlog.InstallAsEventCreate(o.name, eventlog.Error|eventlog.Warning|eventlog.Info); err != nil && !strings.Contains(err.Error(), "exists") {
		return fail("event log source", err)
	}
	return nil
}

// installDirSDDL: owner Administrators; protected DACL (nothing inherited from above):
// SYSTEM and Administrators full control, Users read and execute (0x1200a9), inherited by
// everything inside.
const installDirSDDL = "O:BAD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)"

// placeFiles creates o.dir with its protected ACL, checks it, and copies router.exe and
// the WinDivert files into it. It returns the installed router.exe's path.
func placeFiles(o installOptions) (string, error) {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s (run from an elevated prompt): %w", o.dir, err)
	}
	sd, err := windows.SecurityDescriptorFromString(installDirSDDL)
	if err != nil {
		return "", fmt.Errorf("install directory ACL: %w", err)
	}
	owner, _, err := sd.Owner()
	if err != nil {
		return "", fmt.Errorf("install directory ACL: %w", err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return "", fmt.Errorf("install directory ACL: %w", err)
	}
	if err := windows.SetNamedSecurityInfo(o.dir, windows.SE_FILE_OBJECT,
		windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION,
		owner, nil, dacl, nil); err != nil {
		return "", fmt.Errorf("restrict %s to administrators (run from an elevated prompt): %w", o.dir, err)
	}
	if err := o.checkDir(o.dir); err != nil {
		return "", err
	}
	target := filepath.Join(o.dir, "router.exe")
	if err := copyExe(o.exe, target); err != nil {
		return "", err
	}
	if err := o.winDivert(o.dir); err != nil {
		return "", fmt.Errorf("WinDivert files: %w", err)
	}
	return target, nil
}

// aclOf reads the access list of path as the checks see it (Writers).
func aclOf(path string) (aces []ACE, hasDACL bool, err error) {
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return nil, false, fmt.Errorf("read the access list of %s: %w", path, err)
	}
	dacl, _, err := sd.DACL()
	if err != nil || dacl == nil {
		return nil, false, nil
	}
	for i := uint32(0); i < uint32(dacl.AceCount); i++ {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			return nil, false, fmt.Errorf("read the access list of %s: %w", path, err)
		}
		sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart))
		aces = append(aces, ACE{SID: sid.String(), Mask: uint32(ace.Mask),
			Allow:       ace.Header.AceType == windows.ACCESS_ALLOWED_ACE_TYPE,
			InheritOnly: ace.Header.AceFlags&windows.INHERIT_ONLY_ACE != 0})
	}
	return aces, true, nil
}

// checkAdminOnly refuses dir when its access list lets an account other than SYSTEM,
// Administrators or TrustedInstaller write (or has none at all, which lets everyone).
func checkAdminOnly(dir string) error {
	aces, has, err := aclOf(dir)
	if err != nil {
		return err
	}
	if w := Writers(aces, has); len(w) > 0 {
		return fmt.Errorf("refusing %s: %s may write there, and could replace router.exe, which runs as SYSTEM; install from an elevated prompt into a directory only administrators can write", dir, strings.Join(w, ", "))
	}
	return nil
}

// CheckTrusted refuses each file the service reads (its config, a password_file) when an
// account other than SYSTEM, Administrators or TrustedInstaller may change it or its
// directory (a folder under C:\ProgramData lets every user add files; a profile lets its
// user): the router runs as SYSTEM and would obey it. The error names the account and the
// icacls command that fixes it.
func CheckTrusted(paths ...string) error {
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return fmt.Errorf("check %s: %w", p, err)
		}
		for _, obj := range []string{abs, filepath.Dir(abs)} {
			aces, has, err := aclOf(obj)
			if err != nil {
				return fmt.Errorf("check %s: %w", abs, err)
			}
			if w := Writers(aces, has); len(w) > 0 {
				return fmt.Errorf("refusing %s: %s may change %s, and the router service runs as SYSTEM and trusts it; fix (elevated): %s",
					abs, strings.Join(w, ", "), obj, protectCommand(filepath.Dir(abs)))
			}
		}
	}
	return nil
}

// copyExe copies src to dst through a temporary file and a rename (which fails while the
// installed router.exe runs). Copying a file onto itself does nothing.
func copyExe(src, dst string) error {
	if same, err := sameFile(src, dst); err == nil && same {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy router.exe: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "router.exe.new-*")
	if err != nil {
		return fmt.Errorf("copy router.exe: %w", err)
	}
	_, werr := io.Copy(tmp, in)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("copy router.exe: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("copy router.exe to %s (is the service running? stop it first): %w", dst, err)
	}
	return nil
}

func sameFile(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}

// UpgradeInPlace is `router service upgrade`: Upgrade with the service manager, exe as the
// new router.exe and guarded telling whether the guard is installed.
func UpgradeInPlace(exe string, guarded func() (bool, error)) error {
	dir, err := InstallDir()
	if err != nil {
		return fmt.Errorf("upgrade service: %w", err)
	}
	return Upgrade(UpgradeSteps{
		Stop: func() error {
			return withService(Name, func(s *mgr.Service) error { return stopAndWait(s, 60*time.Second) })
		},
		Place: func() error {
			_, err := placeFiles(installOptions{name: Name, exe: exe, dir: dir, winDivert: dist.Install, checkDir: checkAdminOnly})
			return err
		},
		Start:   Start,
		Guarded: guarded,
	})
}

// protectCommand is the fix the refusals print: an access list that only SYSTEM and
// Administrators may write, Users reading.
func protectCommand(path string) string {
	return `icacls "` + path + `" /inheritance:r /grant:r SYSTEM:(OI)(CI)F Administrators:(OI)(CI)F Users:(OI)(CI)RX`
}
