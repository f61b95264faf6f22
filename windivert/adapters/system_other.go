//go:build !windows

package adapters

import (
	"errors"
	"net/netip"
)

var errWindowsOnly = errors.New("adapters: Windows only (on Linux the VM-facing interfaces are vm_interfaces; see `ip -br addr`)")

type noSystem struct{}

// NewSystem returns this machine's System: on this OS every call fails.
func NewSystem() System { return noSystem{} }

func (noSystem) Interfaces() ([]Interface, error) { return nil, errWindowsOnly }
func (noSystem) NATs() ([]netip.Prefix, error)    { return nil, errWindowsOnly }
func (noSystem) WSL() (WSL, error)                { return WSL{}, errWindowsOnly }
