//go:build !windows

package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentcage/router/router/control"
)

// switchingHandler is fakeHandler that switches profiles: "offline" exists, others not.
type switchingHandler struct{ fakeHandler }

func (switchingHandler) SwitchProfile(guest, profile string) (control.ProfileSwitch, error) {
	if profile != "offline" && profile != "default" {
		return control.ProfileSwitch{}, errors.New(`profile "` + profile + `": no such profile`)
	}
	return control.ProfileSwitch{Guest: "vm " + guest, Profile: profile, Ended: 1}, nil
}

func (switchingHandler) Status() control.Status {
	st := *sampleStatus()
	st.ProfileNames = []string{"default", "build", "offline"}
	st.Profiles = []control.GuestProfile{{Guest: "vm 10.0.2.0/24", Profile: "offline"}}
	return st
}

// TestProfileCommand: `router profile GUEST PROFILE` over a real control socket, and the
// switched guests in `router status`.
func TestProfileCommand(t *testing.T) {
	sock := serveControl(t, switchingHandler{})
	for _, c := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"10.0.2.0/24", "offline"}, exitOK, "vm 10.0.2.0/24: profile offline; 1 live flows it refuses ended\n", ""},
		{[]string{"--json", "10.0.2.0/24", "offline"}, exitOK, `"ended": 1`, ""},
		{[]string{"10.0.2.0/24", "nope"}, exitUsage, "", `no such profile`},
		{[]string{"10.0.2.0/24"}, exitUsage, "", "want GUEST PROFILE"},
	} {
		out, errOut, code := run(t, append([]string{"profile", "--socket", sock}, c.args...)...)
		if code == exitOK != (c.code == exitOK) || !strings.Contains(out, c.stdout) || !strings.Contains(errOut, c.stderr) {
			t.Errorf("router profile %v: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.args, code, out, errOut, c.code, c.stdout, c.stderr)
		}
	}
	out, _, code := run(t, "status", "--socket", sock)
	if code != exitOK || !strings.Contains(out, "vm 10.0.2.0/24  offline") || !strings.Contains(out, "profiles: default, build, offline") {
		t.Errorf("status: exit %d:\n%s", code, out)
	}
}
