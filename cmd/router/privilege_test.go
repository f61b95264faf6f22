package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// TestAdminCommandsWithoutPrivilege: run, guard and cleanup without the privilege say what
// to do (sudo, or the service) before they read anything, and nothing about a config, a
// state directory or the firewall; their --help needs no privilege, nor do the other
// commands.
func TestAdminCommandsWithoutPrivilege(t *testing.T) {
	unprivileged := func() (bool, error) { return false, nil }
	hint := rootHint(runtime.GOOS)
	for _, args := range [][]string{
		{"run", "--config", specConfig},
		{"run", "--config", "/nonexistent.toml"},
		{"guard", "--config", specConfig},
		{"cleanup"},
		{"cleanup", "--force"},
	} {
		var out, errOut bytes.Buffer
		code := dispatchAs(args, &out, &errOut, unprivileged)
		want := "router " + args[0] + ": " + hint + "\n"
		if code != exitUsage || errOut.String() != want || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", args, code, out.String(), errOut.String(), exitUsage, want)
		}
	}
	for _, args := range [][]string{{"run", "--help"}, {"guard", "-h"}, {"lint", "--config", specConfig, "--os", "windows"}} {
		var out, errOut bytes.Buffer
		if code := dispatchAs(args, &out, &errOut, unprivileged); code != exitOK || strings.Contains(errOut.String(), hint) {
			t.Errorf("%q without the privilege: exit %d, stderr %q", args, code, errOut.String())
		}
	}
	var admins []string
	for _, c := range commands() {
		if c.admin {
			admins = append(admins, c.name)
		}
	}
	if got := strings.Join(admins, " "); got != "run guard cleanup" {
		t.Errorf("the commands that need the privilege: %s", got)
	}
}

// TestControlRefusedSaysWhatToDo: a control channel that refuses this user is reported as
// such (run it with sudo), never as a router that does not run; a missing one as the latter.
func TestControlRefusedSaysWhatToDo(t *testing.T) {
	refused := explainDial(fmt.Errorf("connect to the running router at /run/router/control.sock: %w", os.NewSyscallError("connect", syscall.EACCES)), "linux")
	if s := refused.Error(); !strings.Contains(s, "the control socket is root's: run it with sudo") || strings.Contains(s, "is the router running") {
		t.Errorf("permission denied: %q", s)
	}
	missing := explainDial(fmt.Errorf("connect: %w", os.NewSyscallError("connect", syscall.ENOENT)), "linux")
	if s := missing.Error(); !strings.Contains(s, "is the router running?") || strings.Contains(s, "sudo") {
		t.Errorf("no socket: %q", s)
	}
	if s := explainDial(os.ErrPermission, "windows").Error(); !strings.Contains(s, "elevated prompt") {
		t.Errorf("windows: %q", s)
	}
}
