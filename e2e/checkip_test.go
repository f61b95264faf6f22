//go:build linux

package e2e

import (
	"strings"
	"syscall"
	"testing"

	"github.com/agentcage/router/internal/lab"
)

// TestCheckIP runs `router check-ip` in the guest: with the router up it proves the cage;
// with the router's capture removed (the hypervisor NAT alone) it reports the leak.
func TestCheckIP(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	probe := []string{"check-ip", "--echo", lab.EchoURL, "--model", "http://10.0.2.2:47831",
		"--dns-whoami", lab.WhoamiName, "--stun", lab.UDPEchoAddr, "--timeout", "2s"}

	out, code := run(s.ctx, s.lab.Guest(), routerBin, append(probe, "--expect", lab.ExitAddr, "--expect-not", lab.HostUplinkAddr)...)
	if code != 0 {
		t.Errorf("router up, --expect the proxy's exit: exit %d\n%s", code, out)
	}
	for _, want := range []string{"✓ exit  " + lab.ExitAddr, "✓ model " + lab.ModelID, "✓ dns", "✓ udp"} {
		if !strings.Contains(out, want) {
			t.Errorf("router up: missing %q in\n%s", want, out)
		}
	}
	out, code = run(s.ctx, s.lab.Guest(), routerBin, append(probe, "--expect", lab.HostUplinkAddr)...)
	if code != 1 {
		t.Errorf("router up, --expect the host's own address: exit %d, want 1\n%s", code, out)
	}
	s.wantNoLeak("check-ip with the router up")

	// Take the cage down: stop the router and remove its capture.
	s.stopRouter(syscall.SIGTERM)
	if out, code := run(s.ctx, s.lab.Host(), routerBin, "cleanup", "--config", s.cfg); code != 0 {
		t.Fatalf("router cleanup: exit %d, %s", code, out)
	}
	out, code = run(s.ctx, s.lab.Guest(), routerBin, append(probe, "--expect", lab.ExitAddr)...)
	if code != 1 {
		t.Errorf("capture removed: exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{"✗ exit  " + lab.HostUplinkAddr, "✗ udp"} {
		if !strings.Contains(out, want) {
			t.Errorf("capture removed: missing %q in\n%s", want, out)
		}
	}
}
