package checkip

import (
	"errors"
	"syscall"
)

// Winsock error codes (winerror.h); the syscall package returns them as syscall.Errno.
const (
	wsaEAFNOSUPPORT  syscall.Errno = 10047
	wsaEADDRNOTAVAIL syscall.Errno = 10049
	wsaENETUNREACH   syscall.Errno = 10051
	wsaECONNRESET    syscall.Errno = 10054 // what recv on UDP reports for ICMP port unreachable
	wsaECONNREFUSED  syscall.Errno = 10061
	wsaEHOSTUNREACH  syscall.Errno = 10065
)

// isUnreachable reports whether err says there is no route to the destination.
func isUnreachable(err error) bool {
	return errors.Is(err, wsaENETUNREACH) || errors.Is(err, wsaEHOSTUNREACH)
}

// isRefused reports whether err is an ICMP error reported on a UDP socket (port unreachable).
func isRefused(err error) bool {
	return errors.Is(err, wsaECONNREFUSED) || errors.Is(err, wsaECONNRESET)
}

// isNoIPv6Stack reports whether err says the system has no IPv6 (disabled, or no source
// address).
func isNoIPv6Stack(err error) bool {
	return errors.Is(err, wsaEAFNOSUPPORT) || errors.Is(err, wsaEADDRNOTAVAIL)
}
