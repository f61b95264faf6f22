// Package capturetest provides a fake capture.Platform, so that the daemon's start, reload
// and stop run in any test process without a capture (no nftables, no WinDivert, no root).
package capturetest

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// Platform records what the daemon asks of the capture and captures nothing: Original
// fails, Control, Owner and FromVM are nil, it fails while running only when told (Fail),
// has no resolver and counts no refusal. Its zero value is ready; it is safe for concurrent
// use, and mu guards every field below it.
type Platform struct {
	mu         sync.Mutex
	envs       int
	installs   []*conf.Config
	decisions  []*policy.Policy
	installErr error
	failed     chan error // made on first use; buffered 1
	closes     int
}

var _ capture.Platform = (*Platform)(nil)

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

// Env implements capture.Platform: the zero Env.
func (p *Platform) Env() policy.Env {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.envs++
	return policy.Env{}
}

// Install implements capture.Platform: it records cfg and pol, or fails (SetInstallError).
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

// Original implements capture.Platform: nothing is redirected.
func (p *Platform) Original(*net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
	return netip.AddrPort{}, netip.AddrPort{}, errors.New("fake platform redirects nothing")
}

// Control implements capture.Platform: no mark.
func (p *Platform) Control(uint32) func(string, string, syscall.RawConn) error { return nil }

// Owner implements capture.Platform: no process lookup.
func (p *Platform) Owner() func(*net.TCPConn, netip.AddrPort, netip.AddrPort) (rules.Owner, error) {
	return nil
}

// FromVM implements capture.Platform: only vm_networks are VM sources.
func (p *Platform) FromVM() func(netip.Addr) bool { return nil }

// Failed implements capture.Platform: it delivers what Fail was given.
func (p *Platform) Failed() <-chan error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failedLocked()
}

func (p *Platform) failedLocked() chan error {
	if p.failed == nil {
		p.failed = make(chan error, 1)
	}
	return p.failed
}

// Fail makes the running capture fail with err (Failed delivers it); a second Fail before
// the first was taken is dropped.
func (p *Platform) Fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case p.failedLocked() <- err:
	default:
	}
}

// Close implements capture.Platform: it counts the calls (Closes).
func (p *Platform) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closes++
	return nil
}

// Closes returns how many times Close was called.
func (p *Platform) Closes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closes
}

// Resolver implements capture.Platform: there is none.
func (p *Platform) Resolver() (string, error) { return "", errors.New("no resolver") }

// Refusals implements capture.Platform: the fake refuses nothing.
func (p *Platform) Refusals() []refusal.Stat { return nil }
