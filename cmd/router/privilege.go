package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"

	"github.com/agentcage/router/router/control"
)

// privileged reports whether this process may change the firewall: on Linux whether it
// holds CAP_NET_ADMIN (root does; so does the unit, which keeps only the capabilities it
// needs), on Windows whether its token is elevated. An error: it cannot tell (the command
// then runs and fails on its own if it must).
type privileged func() (bool, error)

// rootHint is what a command that needs the privilege says to do without it, on goos.
func rootHint(goos string) string {
	if goos == "windows" {
		return "needs an elevated prompt: run it as administrator, or let the service run it (router service start)"
	}
	return "needs root: run it with sudo, or as the service (systemctl start router)"
}

// controlHint is what a command that asks the daemon says to do when the control channel
// refuses it, on goos.
func controlHint(goos string) string {
	if goos == "windows" {
		return "the control pipe admits only elevated Administrators: run it from an elevated prompt"
	}
	return "the control socket is root's: run it with sudo"
}

// checkPrivilege says on stderr what to do when command name needs the privilege and this
// process lacks it (false: the command must not run).
func checkPrivilege(name string, priv privileged, stderr io.Writer) bool {
	ok, err := priv()
	if err != nil || ok {
		return true
	}
	fmt.Fprintf(stderr, "router %s: %s\n", name, rootHint(runtime.GOOS))
	return false
}

// dialControl connects to the daemon's control channel at path. Its error says the likely
// cause: the channel refused this user (what to do), or no router listens there.
func dialControl(ctx context.Context, path string) (*control.Client, error) {
	c, err := control.Dial(ctx, path)
	if err != nil {
		return nil, explainDial(err, runtime.GOOS)
	}
	return c, nil
}

// explainDial adds to a failed dial of the control channel what to do about it.
func explainDial(err error, goos string) error {
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w (%s)", err, controlHint(goos))
	}
	return fmt.Errorf("%w (is the router running?)", err)
}

// helpAsked reports whether args ask for a command's help (its flag set prints it, and
// the command does nothing else).
func helpAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}
