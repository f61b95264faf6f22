package windivert

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
)

// Errno is a Windows error number returned by a WinDivert call (GetLastError). Its message
// says what the number means for WinDivert and what to do (doc/windivert.html §5.4 of
// WinDivert 2.2.2 for WinDivertOpen; §5.5 for Recv). On Windows an Errno also matches the
// syscall.Errno (windows.Errno) of the same value with errors.Is.
type Errno uint32

// Windows error numbers that WinDivert calls return.
const (
	ErrFileNotFound       Errno = 2    // ERROR_FILE_NOT_FOUND
	ErrAccessDenied       Errno = 5    // ERROR_ACCESS_DENIED
	ErrInvalidHandle      Errno = 6    // ERROR_INVALID_HANDLE
	ErrInvalidParameter   Errno = 87   // ERROR_INVALID_PARAMETER
	ErrInsufficientBuffer Errno = 122  // ERROR_INSUFFICIENT_BUFFER
	ErrNoData             Errno = 232  // ERROR_NO_DATA
	ErrOperationAborted   Errno = 995  // ERROR_OPERATION_ABORTED
	ErrIOPending          Errno = 997  // ERROR_IO_PENDING
	ErrInvalidImageHash   Errno = 577  // ERROR_INVALID_IMAGE_HASH
	ErrDriverFailedPrior  Errno = 654  // ERROR_DRIVER_FAILED_PRIOR_UNLOAD
	ErrServiceDisabled    Errno = 1058 // ERROR_SERVICE_DISABLED
	ErrServiceNotExist    Errno = 1060 // ERROR_SERVICE_DOES_NOT_EXIST
	ErrHostUnreachable    Errno = 1232 // ERROR_HOST_UNREACHABLE
	ErrDriverBlocked      Errno = 1275 // ERROR_DRIVER_BLOCKED
	ErrEPTNotRegistered   Errno = 1753 // EPT_S_NOT_REGISTERED
)

// text says what an error number means for WinDivert; "" for numbers it does not know.
func (e Errno) text() string {
	switch e {
	case ErrFileNotFound:
		return "the WinDivert driver file WinDivert64.sys was not found beside WinDivert.dll (antivirus software often quarantines it)"
	case ErrAccessDenied:
		return "access denied: WinDivert needs Administrator rights (run the router service as LocalSystem or from an elevated prompt)"
	case ErrInvalidHandle:
		return "invalid WinDivert handle"
	case ErrInvalidParameter:
		return "invalid parameter: the filter string, layer, priority or flags are not valid"
	case ErrInsufficientBuffer:
		return "the packet was larger than the buffer and was truncated"
	case ErrNoData:
		return "the handle was shut down and its queue is empty"
	case ErrOperationAborted:
		return "the call was cancelled (the handle is closing)"
	case ErrIOPending:
		return "overlapped I/O pending"
	case ErrInvalidImageHash:
		return "the WinDivert64.sys driver signature was not accepted (a tampered or unsigned driver, or a Windows without SHA-2 driver-signing support)"
	case ErrDriverFailedPrior:
		return "another, incompatible WinDivert version is already loaded by another application; close it (or reboot) and retry"
	case ErrServiceDisabled:
		return "the WinDivert driver service is disabled; a stale entry HKLM\\SYSTEM\\CurrentControlSet\\Services\\WinDivert may be left by another application (sc delete WinDivert, then retry)"
	case ErrServiceNotExist:
		return "the WinDivert driver is not installed and NO_INSTALL was given"
	case ErrHostUnreachable:
		return "an injected packet could not be delivered (host unreachable); often an impostor packet looping between WFP drivers"
	case ErrDriverBlocked:
		return "Windows blocked the WinDivert driver (antivirus, HVCI / vulnerable-driver blocklist, or a VM without driver support)"
	case ErrEPTNotRegistered:
		return "the Base Filtering Engine (BFE) service is not running; WinDivert needs it (sc config BFE start= auto, sc start BFE)"
	}
	return ""
}

func (e Errno) Error() string {
	if s := e.text(); s != "" {
		return fmt.Sprintf("%s (Windows error %d)", s, uint32(e))
	}
	return fmt.Sprintf("Windows error %d", uint32(e))
}

// Is makes an Errno match the syscall.Errno of the same number on Windows, where
// syscall.Errno values are Windows error numbers.
func (e Errno) Is(target error) bool {
	var se syscall.Errno
	if runtime.GOOS == "windows" && errors.As(target, &se) {
		return uint32(se) == uint32(e)
	}
	return false
}

// Error is a failed WinDivert operation: which call, and the reason (usually an Errno).
type Error struct {
	Op  string // "open", "recv", "send", "shutdown", "close", "set param", "get param", ...
	Err error
}

func (e *Error) Error() string { return "windivert: " + e.Op + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// ErrClosed is returned by the methods of a Handle after Close.
var ErrClosed = errors.New("windivert: handle closed")

// ErrShutdown is returned by Recv once the handle was shut down for receiving and its
// queue is empty (ERROR_NO_DATA). It is the normal way a receive loop ends.
var ErrShutdown = errors.New("windivert: handle shut down")
