package proc

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// NewSystemWindowsResolver returns a WindowsResolver over this machine's processes and
// Service Control Manager. The router runs as LocalSystem, which may open every process
// with PROCESS_QUERY_LIMITED_INFORMATION (protected ones included); log may be nil.
func NewSystemWindowsResolver(log *slog.Logger) *WindowsResolver {
	return NewWindowsResolver(OSProcesses{}, SCM{}, WindowsOptions{Log: log})
}

// OSProcesses implements ProcessQuerier with OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION),
// GetProcessTimes and QueryFullProcessImageNameW.
type OSProcesses struct{}

func openProcess(pid uint32) (windows.Handle, error) {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, pid)
	if err != nil {
		if errors.Is(err, windows.ERROR_INVALID_PARAMETER) {
			return 0, ErrNoProcess // OpenProcess's answer for a PID that names no process
		}
		return 0, fmt.Errorf("open process: %w", err)
	}
	return h, nil
}

// Created implements ProcessQuerier.
func (OSProcesses) Created(pid uint32) (time.Time, error) {
	h, err := openProcess(pid)
	if err != nil {
		return time.Time{}, err
	}
	defer windows.CloseHandle(h)
	var c, e, k, u windows.Filetime
	if err := windows.GetProcessTimes(h, &c, &e, &k, &u); err != nil {
		return time.Time{}, fmt.Errorf("get process times: %w", err)
	}
	return time.Unix(0, c.Nanoseconds()), nil
}

// ImagePath implements ProcessQuerier.
func (OSProcesses) ImagePath(pid uint32) (string, error) {
	h, err := openProcess(pid)
	if err != nil {
		return "", err
	}
	defer windows.CloseHandle(h)
	for n := uint32(windows.MAX_PATH); n <= 1<<15; n *= 4 {
		buf := make([]uint16, n)
		size := n
		err := windows.QueryFullProcessImageName(h, 0, &buf[0], &size)
		if err == nil {
			return windows.UTF16ToString(buf[:size]), nil
		}
		if !errors.Is(err, windows.ERROR_INSUFFICIENT_BUFFER) {
			return "", fmt.Errorf("query full process image name: %w", err)
		}
	}
	return "", errors.New("query full process image name: path longer than 32768 characters")
}

// SCM implements ServiceEnumerator over the local Service Control Manager.
type SCM struct{}

// ServicesByPID implements ServiceEnumerator: EnumServicesStatusExW with
// SC_ENUM_PROCESS_INFO for SERVICE_WIN32 services in state SERVICE_ACTIVE, grouped by the
// PID of their process.
func (SCM) ServicesByPID() (map[uint32][]string, error) {
	m, err := windows.OpenSCManager(nil, nil, windows.SC_MANAGER_ENUMERATE_SERVICE)
	if err != nil {
		return nil, fmt.Errorf("open service manager: %w", err)
	}
	defer windows.CloseServiceHandle(m)
	out := map[uint32][]string{}
	var resume uint32
	buf := make([]byte, 64<<10)
	for range 64 { // each round returns a part of the list; 64 rounds is far beyond any host
		var need, n uint32
		err := windows.EnumServicesStatusEx(m, windows.SC_ENUM_PROCESS_INFO, windows.SERVICE_WIN32,
			windows.SERVICE_ACTIVE, &buf[0], uint32(len(buf)), &need, &n, &resume, nil)
		if err != nil && !errors.Is(err, windows.ERROR_MORE_DATA) {
			return nil, fmt.Errorf("enumerate services: %w", err)
		}
		if n > 0 {
			es := unsafe.Slice((*windows.ENUM_SERVICE_STATUS_PROCESS)(unsafe.Pointer(&buf[0])), n)
			for _, e := range es {
				pid := e.ServiceStatusProcess.ProcessId
				if pid == 0 {
					continue // not running (a service in a pending state)
				}
				out[pid] = append(out[pid], windows.UTF16PtrToString(e.ServiceName))
			}
		}
		if err == nil {
			return out, nil
		}
		if n == 0 && need > uint32(len(buf)) {
			buf = make([]byte, need)
		}
	}
	return nil, errors.New("enumerate services: list did not end")
}

var (
	_ ProcessQuerier    = OSProcesses{}
	_ ServiceEnumerator = SCM{}
)
