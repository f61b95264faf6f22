//go:build windows

package control

import (
	"context"
	"fmt"
	"net"

	"github.com/Microsoft/go-winio"
)

// DefaultPath is the named pipe the daemon listens on: names under ProtectedPrefix\Administrators
// can only be created by Administrators and SYSTEM (no other process can squat it).
const DefaultPath = `\\.\pipe\ProtectedPrefix\Administrators\router\control`

// sddl lets SYSTEM and Administrators in, at high integrity (so a non-elevated token of an
// administrator cannot open it), and nobody else.
const sddl = "O:SYD:P(A;;GA;;;SY)(A;;GA;;;BA)S:(ML;;NWNRNX;;;HI)"

// Listen opens the control pipe at path.
func Listen(path string) (net.Listener, error) {
	ln, err := winio.ListenPipe(path, &winio.PipeConfig{SecurityDescriptor: sddl})
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	return ln, nil
}

func dial(ctx context.Context, path string) (net.Conn, error) {
	return winio.DialPipeContext(ctx, path)
}
