//go:build !windows

package main

import (
	"errors"
	"io"
)

// runHolder is `router hold`, Windows only.
func runHolder(uintptr, uint32, io.Reader, io.Writer) error {
	return errors.New("hold: Windows only (the WinDivert holder)")
}

// relayHolder is `router hold --relay`, Windows only.
func relayHolder(uintptr, uint32) error {
	return errors.New("hold: Windows only (the WinDivert holder)")
}
