//go:build windows

package service

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/windows"
)

// ErrAlreadyRunning is returned by LockInstance when another router holds the lock.
var ErrAlreadyRunning = errors.New("another router is already running on this machine")

// instanceSDDL lets only SYSTEM and Administrators open the mutex (full access), so an
// unprivileged process cannot hold it to keep the router from starting. Creating names in
// the Global namespace takes SeCreateGlobalPrivilege, which services and administrators
// have and ordinary users in their sessions do not.
const instanceSDDL = "O:BAD:P(A;;GA;;;SY)(A;;GA;;;BA)"

// LockInstance makes this process the only router on the machine: it creates the named
// mutex Global\<name>-instance (name is the service name, normally Name) and keeps it
// until release is called or the process ends, however it ends (Windows closes the
// handle). If the mutex exists, it returns ErrAlreadyRunning; a mutex this process
// may not open (another account created it) counts as existing. Call it before
// reconciling the guard, so two routers never fight over the guard's permits. release is
// safe to call more than once.
func LockInstance(name string) (release func(), err error) {
	sd, err := windows.SecurityDescriptorFromString(instanceSDDL)
	if err != nil {
		return nil, fmt.Errorf("instance lock: %w", err)
	}
	sa := &windows.SecurityAttributes{Length: uint32(unsafe.Sizeof(windows.SecurityAttributes{})), SecurityDescriptor: sd}
	p, err := windows.UTF16PtrFromString(`Global\` + name + "-instance")
	if err != nil {
		return nil, fmt.Errorf("instance lock: %w", err)
	}
	h, err := windows.CreateMutex(sa, false, p)
	switch {
	case errors.Is(err, windows.ERROR_ALREADY_EXISTS):
		windows.CloseHandle(h)
		return nil, ErrAlreadyRunning
	case errors.Is(err, windows.ERROR_ACCESS_DENIED):
		return nil, ErrAlreadyRunning
	case err != nil:
		return nil, fmt.Errorf("instance lock: %w", err)
	}
	var once sync.Once
	return func() { once.Do(func() { windows.CloseHandle(h) }) }, nil
}
