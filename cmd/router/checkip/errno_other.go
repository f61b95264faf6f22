//go:build !windows

package checkip

import (
	"errors"
	"syscall"
)

// isUnreachable reports whether err says there is no route to the destination.
func isUnreachable(err error) bool {
	return errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH)
}

// isRefused reports whether err is an ICMP error reported on a UDP socket (port unreachable).
func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// isNoIPv6Stack reports whether err says the system has no IPv6 (disabled, or no source
// address).
func isNoIPv6Stack(err error) bool {
	return errors.Is(err, syscall.EAFNOSUPPORT) || errors.Is(err, syscall.EADDRNOTAVAIL)
}
