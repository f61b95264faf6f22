package main

import (
	"log/slog"
	"syscall"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/capture"
	nftplatform "github.com/agentcage/router/router/nftcap/platform"
)

// The capture of this operating system is nftables' (package router/nftcap/platform): the
// one place the command chooses it.

// newPlatform returns the capture the daemon runs over.
func newPlatform(log *slog.Logger) capture.Platform { return nftplatform.New(log) }

// cleanup removes the router's capture and guard (`router cleanup`).
func cleanup(table string) (string, error) { return nftplatform.Cleanup(table) }

// ownControl marks a helper's sockets as the router's own (`router check-proxy`).
func ownControl(mark uint32) func(network, address string, c syscall.RawConn) error {
	return nftplatform.OwnControl(mark)
}

// guardYields: a running router's table is its own, built from the config it runs and kept
// by its healer; a guard from the file as it is now (edited since, say) put in its place
// would capture by another config until the healer put the router's back. So `router
// guard` leaves a running router alone.
const guardYields = true

// installGuard installs the guard for cfg without the daemon (`router guard`).
func installGuard(cfg *conf.Config) (string, error) { return nftplatform.InstallGuard(cfg) }

// installLastGuard installs the last good guard (`router guard --last`).
func installLastGuard() (string, time.Time, error) { return nftplatform.InstallLastGuard() }

// guardInstalled reports whether the guard is in place.
func guardInstalled(table string) (bool, error) { return nftplatform.GuardInstalled(table) }
