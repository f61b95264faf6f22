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

// TestCheckIPHostProbe runs `router check-ip --host-probe` in the guest against a host that
// runs a service on 0.0.0.0:8080: with the router up only the model forward answers (the
// probe passes and the service saw nobody); with the cage taken down the probe reports the
// service **open** and fails.
func TestCheckIPHostProbe(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	reached := s.hostService("0.0.0.0:8080", "HTTP/1.0 200 OK\r\n\r\nhost dev server\n")
	probe := []string{"check-ip", "--echo", lab.EchoURL, "--no-udp", "--no-ipv6", "--timeout", "1s",
		"--host-probe", "--model", "http://" + lab.GatewayAddr + ":47831"}

	out, code := run(s.ctx, s.lab.Guest(), routerBin, probe...)
	t.Logf("router up:\n%s", out)
	if code != 0 {
		t.Errorf("router up: exit %d, want 0\n%s", code, out)
	}
	for _, want := range []string{"✓ host", lab.GatewayAddr + " (default gateway): open (allowed) 47831"} {
		if !strings.Contains(out, want) {
			t.Errorf("router up: missing %q in\n%s", want, out)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("router up: the host's service took %d connections from the guest", n)
	}

	s.stopRouter(syscall.SIGTERM)
	if out, code := run(s.ctx, s.lab.Host(), routerBin, "cleanup", "--config", s.cfg); code != 0 {
		t.Fatalf("router cleanup: exit %d, %s", code, out)
	}
	out, code = run(s.ctx, s.lab.Guest(), routerBin, probe...)
	t.Logf("cage removed:\n%s", out)
	if code != 1 {
		t.Errorf("cage removed: exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{"✗ host", "**open** to the guest: " + lab.GatewayAddr + ":8080", lab.GatewayAddr + " (default gateway): **open** 8080"} {
		if !strings.Contains(out, want) {
			t.Errorf("cage removed: missing %q in\n%s", want, out)
		}
	}
	if reached.Load() == 0 {
		t.Error("cage removed: the probe did not reach the host's service")
	}
}
