//go:build !linux && !windows

package daemon

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"syscall"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

var errNoCapture = errors.New("capture on this operating system is not built yet")

type noPlatform struct{}

// NewPlatform returns the capture of this operating system.
func NewPlatform(*slog.Logger) Platform { return noPlatform{} }

func (noPlatform) Env() policy.Env                                         { return policy.Env{} }
func (noPlatform) Install(*conf.Config, *policy.Policy, *dns.Server) error { return errNoCapture }
func (noPlatform) FromVM() func(netip.Addr) bool                           { return nil }
func (noPlatform) Failed() <-chan error                                    { return nil }
func (noPlatform) Close() error                                            { return nil }
func (noPlatform) Original(*net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
	return netip.AddrPort{}, netip.AddrPort{}, errNoCapture
}
func (noPlatform) Control(uint32) func(string, string, syscall.RawConn) error { return nil }
func (noPlatform) Owner() func(*net.TCPConn, netip.AddrPort, netip.AddrPort) (proc.Info, error) {
	return nil
}
func (noPlatform) Resolver() (string, error) { return "", errNoCapture }

func (noPlatform) Refusals() []refusal.Stat { return nil }

// Cleanup removes the router's capture.
func Cleanup(table string) (string, error) { return "", errNoCapture }

// OwnControl is nil: there is no capture.
func OwnControl(uint32) func(network, address string, c syscall.RawConn) error { return nil }
