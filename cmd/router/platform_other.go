//go:build !linux && !windows

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// No capture is built for this operating system: the daemon starts, and its install fails.

var (
	errNoCapture = errors.New("capture on this operating system is not built yet")
	errNoGuard   = fmt.Errorf("a guard is not built on this operating system: %w", errors.ErrUnsupported)
)

type noPlatform struct{}

// newPlatform returns the capture of this operating system: none.
func newPlatform(*slog.Logger) capture.Platform { return noPlatform{} }

func (noPlatform) Env() policy.Env                                         { return policy.Env{} }
func (noPlatform) Install(*conf.Config, *policy.Policy, *dns.Server) error { return errNoCapture }
func (noPlatform) FromVM() func(netip.Addr) bool                           { return nil }
func (noPlatform) Failed() <-chan error                                    { return nil }
func (noPlatform) Close() error                                            { return nil }
func (noPlatform) Original(*net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
	return netip.AddrPort{}, netip.AddrPort{}, errNoCapture
}
func (noPlatform) Control(uint32) func(string, string, syscall.RawConn) error { return nil }
func (noPlatform) Owner() func(*net.TCPConn, netip.AddrPort, netip.AddrPort) (rules.Owner, error) {
	return nil
}
func (noPlatform) Resolver() (string, error) { return "", errNoCapture }

func (noPlatform) Refusals() []refusal.Stat { return nil }

// cleanup removes the router's capture.
func cleanup(table string) (string, error) { return "", errNoCapture }

// ownControl is nil: there is no capture.
func ownControl(uint32) func(network, address string, c syscall.RawConn) error { return nil }

// guardYields: there is no guard here to install.
const guardYields = false

// installGuard installs the guard for cfg.
func installGuard(cfg *conf.Config) (string, error) { return "", errNoGuard }

// installLastGuard installs the last good guard.
func installLastGuard() (string, time.Time, error) { return "", time.Time{}, errNoGuard }

// guardInstalled reports whether the guard is in place.
func guardInstalled(table string) (bool, error) { return false, errNoGuard }
