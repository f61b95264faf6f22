package platform

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/windows"
)

// serviceSIDTypeNone reads the service name's SID type from the service manager
// (QueryServiceConfig2, SERVICE_CONFIG_SERVICE_SID_INFO) and reports whether it is NONE.
func serviceSIDTypeNone(name string) (bool, error) {
	m, err := windows.OpenSCManager(nil, nil, windows.SC_MANAGER_CONNECT)
	if err != nil {
		return false, fmt.Errorf("sid type of %s: open the service manager: %w", name, err)
	}
	defer windows.CloseServiceHandle(m)
	n, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return false, fmt.Errorf("sid type of %s: %w", name, err)
	}
	s, err := windows.OpenService(m, n, windows.SERVICE_QUERY_CONFIG)
	if err != nil {
		return false, fmt.Errorf("sid type of %s: open the service: %w", name, err)
	}
	defer windows.CloseServiceHandle(s)
	var buf [8]byte // SERVICE_SID_INFO: one DWORD
	var need uint32
	if err := windows.QueryServiceConfig2(s, windows.SERVICE_CONFIG_SERVICE_SID_INFO, &buf[0], uint32(len(buf)), &need); err != nil {
		return false, fmt.Errorf("sid type of %s: %w", name, err)
	}
	return binary.LittleEndian.Uint32(buf[:4]) == windows.SERVICE_SID_TYPE_NONE, nil
}
