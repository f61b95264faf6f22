//go:build !windows

package daemon

import (
	"errors"
	"io"
)

// RunHolder is `router hold`, Windows only.
func RunHolder(uintptr, uint32, io.Reader, io.Writer) error {
	return errors.New("hold: Windows only (the WinDivert holder)")
}

// RelayHolder is `router hold --relay`, Windows only.
func RelayHolder(uintptr, uint32) error {
	return errors.New("hold: Windows only (the WinDivert holder)")
}
