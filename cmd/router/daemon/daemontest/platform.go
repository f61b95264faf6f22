// Package daemontest provides a fake daemon.Platform, so that the daemon's start, reload and
// stop run in any test process without a capture (no nftables, no WinDivert, no root).
package daemontest

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// Platform records what the daemon asks of the capture and captures nothing: Original
// fails, Control, Owner and FromVM are nil, it never fails while running, has no resolver
// and counts no refusal. Its zero value is ready; it is safe for concurrent use, and mu
// guards every field below it.
type Platform struct {
	mu         sync.Mutex
	envs       int
	installs   []*conf.Config
	decisions  []*policy.Policy
	installErr error
}

// SetInstallError makes every Install from now on fail with err (nil: succeed again).
func (p *Platform) SetInstallError(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.installErr = err
}

// Counts returns how many times Env was asked and Install succeeded.
func (p *Platform) Counts() (envs, installs int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.envs, len(p.installs)
}

// Decisions returns the decisions of the successful Installs, in order.
func (p *Platform) Decisions() []*policy.Policy {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*policy.Policy(nil), p.decisions...)
}

// Env implements daemon.Platform: the zero Env.
func (p *Platform) Env() policy.Env {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.envs++
	return policy.Env{}
}

// Install implements daemon.Platform: it records cfg and pol, or fails (SetInstallError).
func (p *Platform) Install(cfg *conf.Config, pol *policy.Policy, _ *dns.Server) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.installErr != nil {
		return p.installErr
	}
	p.installs = append(p.installs, cfg)
	p.decisions = append(p.decisions, pol)
	return nil
}

// Original implements daemon.Platform: nothing is redirected.
func (p *Platform) Original(*net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
	return netip.AddrPort{}, netip.AddrPort{}, errors.New("fake platform redirects nothing")
}

// Control implements daemon.Platform: no mark.
func (p *Platform) Control(uint32) func(string, string, syscall.RawConn) error { return nil }

// Owner implements daemon.Platform: no process lookup.
func (p *Platform) Owner() func(*net.TCPConn, netip.AddrPort, netip.AddrPort) (proc.Info, error) {
	return nil
}

// FromVM implements daemon.Platform: only vm_networks are VM sources.
func (p *Platform) FromVM() func(netip.Addr) bool { return nil }

// Failed implements daemon.Platform: the fake never fails while running.
func (p *Platform) Failed() <-chan error { return nil }

// Close implements daemon.Platform.
func (p *Platform) Close() error { return nil }

// Resolver implements daemon.Platform: there is none.
func (p *Platform) Resolver() (string, error) { return "", errors.New("no resolver") }

// Refusals implements daemon.Platform: the fake refuses nothing.
func (p *Platform) Refusals() []refusal.Stat { return nil }
