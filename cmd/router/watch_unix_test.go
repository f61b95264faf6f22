//go:build !windows

package main

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcage/router/router/control"
)

// fakeHandler answers the control channel with the sample status.
type fakeHandler struct{}

func (fakeHandler) Status() control.Status                  { return *sampleStatus() }
func (fakeHandler) NameFor(netip.Addr) (string, bool, bool) { return "", false, false }

// serveControl serves h on a control socket in a temporary directory of t until the test
// ends (and then fails it if serving failed), and returns the socket's path.
func serveControl(t *testing.T, h control.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "control", "control.sock")
	ln, err := control.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- control.Serve(ctx, ln, h, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sock
}

// TestWatchOnce: `router watch --once` over a real control socket prints one plain frame,
// as tall as it needs, and exits 0.
func TestWatchOnce(t *testing.T) {
	sock := serveControl(t, fakeHandler{})
	out, errOut, code := run(t, "watch", "--once", "--socket", sock, "--sort", "bytes")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	checkSays(t, out, "router watch  running ", "LIVE FLOWS 3, by bytes", "198.18.0.9:443 (registry.npmjs.org)", "#2 hypervisor", "s sort: bytes")
	if got := strings.Join(flowOrder(out), " "); got != "11 12 13" {
		t.Errorf("order by bytes: %s", got)
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("escapes in a frame printed to a buffer: %q", out)
	}
}
