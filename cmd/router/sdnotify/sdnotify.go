// Package sdnotify tells systemd about the daemon's state (sd_notify(3)): a unit of
// Type=notify counts the service started once it is told READY=1, so `systemctl start`
// waits for the capture to be installed, and fails when the daemon exits first.
//
// The protocol is one datagram of newline-separated VAR=VALUE assignments on the Unix
// socket named by $NOTIFY_SOCKET (a path, or an abstract name written with a leading '@').
// The caller reads the variable and passes it in; an empty socket means the daemon was not
// started by systemd, and Notify does nothing.
package sdnotify

import (
	"fmt"
	"net"
)

// Ready is the state that ends a Type=notify unit's start.
const Ready = "READY=1"

// Notify sends state to socket. It returns nil without sending when socket is "".
// It is safe for concurrent use (each call dials its own connection).
func Notify(socket, state string) error {
	if socket == "" {
		return nil
	}
	name := socket
	if name[0] == '@' {
		name = "\x00" + name[1:] // an abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", socket, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", socket, err)
	}
	return nil
}
