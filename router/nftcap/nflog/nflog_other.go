//go:build !linux

package nflog

import (
	"errors"
	"fmt"
	"runtime"
)

// Reader is Linux only.
type Reader struct{}

// Listen is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func Listen(group uint16, netNS int) (*Reader, error) {
	return nil, fmt.Errorf("nflog: not supported on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// Read is Linux only.
func (*Reader) Read() ([]Packet, int, error) { return nil, 0, errors.ErrUnsupported }

// Close is Linux only.
func (*Reader) Close() error { return nil }
