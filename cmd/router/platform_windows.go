package main

import (
	"io"
	"log/slog"
	"syscall"
	"time"

	"github.com/agentcage/router/cmd/router/service"
	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/capture"
	winplatform "github.com/agentcage/router/windivert/platform"
)

// The capture of this operating system is WinDivert's and the WFP guard's (package
// windivert/platform): the one place the command chooses it.

// newPlatform returns the capture the daemon runs over: as the service, its permits name
// the service; one router runs at a time.
func newPlatform(log *slog.Logger) capture.Platform {
	return winplatform.New(log, winplatform.Options{
		Service: serviceName(),
		Lock:    func() (func(), error) { return service.LockInstance(service.Name) },
	})
}

// serviceName is the service's name when the service manager runs this process.
func serviceName() string {
	if service.IsService() {
		return service.Name
	}
	return ""
}

// cleanup removes the router's guard (`router cleanup`).
func cleanup(table string) (string, error) { return winplatform.Cleanup(table) }

// ownControl is nil: the router's own traffic is told by its PID.
func ownControl(mark uint32) func(network, address string, c syscall.RawConn) error {
	return winplatform.OwnControl(mark)
}

// guardYields: the guard's WFP filters are persistent and apart from a running router's
// dynamic permits, and `router guard` is how filters a reset removed come back while the
// service runs; so it installs them whether a router runs or not.
const guardYields = false

// installGuard installs the guard for cfg without the daemon (`router guard`).
func installGuard(cfg *conf.Config) (string, error) {
	return winplatform.InstallGuard(cfg, serviceName())
}

// installLastGuard reports the guard that is installed (`router guard --last`).
func installLastGuard() (string, time.Time, error) { return winplatform.InstallLastGuard() }

// guardInstalled reports whether the guard is in place.
func guardInstalled(table string) (bool, error) { return winplatform.GuardInstalled(table) }

// runHolder is `router hold`: the WinDivert holder.
func runHolder(handle uintptr, parent uint32, stdin io.Reader, stdout io.Writer) error {
	return winplatform.RunHolder(handle, parent, stdin, stdout)
}

// relayHolder is `router hold --relay`.
func relayHolder(handle uintptr, parent uint32) error { return winplatform.RelayHolder(handle, parent) }

// installGuardForService installs the guard for the service svc whose executable is
// router (`router service install`).
func installGuardForService(cfg *conf.Config, router, svc string) (string, error) {
	return winplatform.InstallGuardForService(cfg, router, svc)
}
