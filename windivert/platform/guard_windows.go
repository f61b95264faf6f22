package platform

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/windivert/adapters"
	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/guard"
)

// On Windows the guard is WFP's: persistent filters that block the caged apps whenever no
// router runs (package wfp/guard). They survive a crash and a reboot by themselves, so
// there is no state file: the last good guard is the one installed.

// StateDir is empty: the filtering engine keeps the guard.
func StateDir() string { return "" }

// InstallGuard installs (or replaces) the guard for cfg, without permits: the caged apps
// are blocked until a router runs. The router's path is this executable's; service is the
// service's name when the service manager runs this process ("" in the foreground).
func InstallGuard(cfg *conf.Config, service string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("install guard: locate router.exe: %w", err)
	}
	return installGuardAs(cfg, exe, service)
}

// installGuardAs installs the guard for cfg naming router (and service) in its permits.
func installGuardAs(cfg *conf.Config, router, svc string) (string, error) {
	vms, _, err := adapters.List(adapters.NewSystem())
	if err != nil {
		vms = nil // the cage subnets are walled all the same
	}
	plan, unresolved, err := GuardPlan(cfg, guard.SystemMachine(), vms, router, svc)
	if err != nil {
		return "", fmt.Errorf("install guard: %w", err)
	}
	rep, err := guard.New(wfp.NewEngine(), nil).Install(plan)
	if err != nil {
		return "", err
	}
	what := fmt.Sprintf("WFP guard: %d filters; caged apps blocked while no router runs: %d executables; the host walled from %d VM-facing adapters and %d cage subnets", rep.Added+rep.Kept, len(plan.Env.CagedApps), len(plan.Env.VMAdapters), len(plan.Env.CageSubnets))
	if len(unresolved) > 0 {
		what += fmt.Sprintf(" (not found, caged by name only while the router runs: %v)", unresolved)
	}
	return what, nil
}

// InstallGuardForService installs the guard for the service whose executable is router.
func InstallGuardForService(cfg *conf.Config, router, svc string) (string, error) {
	return installGuardAs(cfg, router, svc)
}

// InstallLastGuard reports the guard that is installed: the filtering engine keeps it
// across reboots, so nothing needs to be reinstalled.
func InstallLastGuard() (string, time.Time, error) {
	ok, err := GuardInstalled("")
	switch {
	case err != nil:
		return "", time.Time{}, err
	case !ok:
		return "", time.Time{}, errors.New("no WFP guard is installed")
	}
	return "the WFP guard already installed (it persists across reboots)", time.Time{}, nil
}

// GuardInstalled reports whether the guard's sublayer exists.
func GuardInstalled(string) (bool, error) {
	s, err := wfp.NewEngine().Open(wfp.SessionOptions{Name: "router guard check"})
	if err != nil {
		return false, err
	}
	defer s.Close()
	if _, err := s.Sublayer(guard.SublayerKey); errors.Is(err, wfp.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, nil
}
