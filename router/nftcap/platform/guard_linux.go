package platform

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/nftcap"
)

// The guard without the daemon (`router guard`, the boot unit) is the table `router run`
// installs: with nobody listening, redirected TCP is reset, DNS refused, forwarded VM traffic
// refused and the host closed to the guests. It is derived from the config alone; the last
// table installed is also written to the state directory, so that a boot whose config
// cannot be read still closes the cage.

// guardFile is the last good guard in the state directory.
const guardFile = "guard.json"

// savedGuard is what the state file holds.
type savedGuard struct {
	Config  string      `json:"config"`
	Written time.Time   `json:"written"`
	Spec    nftcap.Spec `json:"spec"`
}

// StateDir is where the last good guard is kept: $STATE_DIRECTORY (systemd's
// StateDirectory=router sets it) or /var/lib/router.
func StateDir() string { return conf.DefaultStateDir("linux", os.Getenv) }

// InstallGuard installs the guard for cfg and records it as the last good one; it returns
// what the guard closes, in words. It is idempotent: the table is replaced whole.
func InstallGuard(cfg *conf.Config) (string, error) {
	s := Spec(cfg)
	if err := nftcap.Install(s); err != nil {
		return "", fmt.Errorf("install guard: %w", err)
	}
	what := fmt.Sprintf("table inet %s: VM networks %s and interfaces %s", s.Table, listOrNone(fmt.Sprint(s.VMNetworks)), listOrNone(strings.Join(s.VMInterfaces, ", ")))
	if s.Local {
		what += "; this host's own TCP, DNS and UDP (local = true)"
	}
	if err := saveGuard(cfg.File, s); err != nil {
		return what, fmt.Errorf("the guard is installed, but not recorded as the last good one: %w", err)
	}
	return what, nil
}

func listOrNone(s string) string {
	if s == "" || s == "[]" {
		return "(none)"
	}
	return strings.Trim(s, "[]")
}

// InstallLastGuard installs the last good guard from the state directory and returns what
// it was (the config it came from and when it was written).
func InstallLastGuard() (from string, written time.Time, err error) {
	path := filepath.Join(StateDir(), guardFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read the last good guard: %w", err)
	}
	var g savedGuard
	if err := json.Unmarshal(b, &g); err != nil {
		return "", time.Time{}, fmt.Errorf("read the last good guard %s: %w", path, err)
	}
	if err := nftcap.Install(g.Spec); err != nil {
		return "", time.Time{}, fmt.Errorf("install the last good guard from %s: %w", path, err)
	}
	return g.Config, g.Written, nil
}

// GuardInstalled reports whether the guard's table exists.
func GuardInstalled(table string) (bool, error) { return nftcap.Installed(table) }

// saveGuard writes s as the last good guard, atomically (a temporary file renamed over the
// old one). A state directory that cannot be written is an error: the boot unit would fall
// back to an older guard.
func saveGuard(config string, s nftcap.Spec) error {
	dir := StateDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save the guard: %w", err)
	}
	b, err := json.MarshalIndent(savedGuard{Config: config, Written: time.Now().UTC(), Spec: s}, "", "  ")
	if err != nil {
		return fmt.Errorf("save the guard: %w", err)
	}
	tmp, err := os.CreateTemp(dir, guardFile+".*")
	if err != nil {
		return fmt.Errorf("save the guard: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save the guard: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, guardFile)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save the guard: %w", err)
	}
	return nil
}
